package ferrobus;

import static ferrobus.Sdk.assertNearNow;
import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.assertServiceBusError;
import static ferrobus.Sdk.bodies;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.util.BinaryData;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusMessageBatch;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.models.AbandonOptions;
import com.azure.messaging.servicebus.models.CreateMessageBatchOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import com.azure.messaging.servicebus.models.ServiceBusReceiveMode;
import com.azure.messaging.servicebus.models.SubQueue;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Queues through the official Java SDK's sender and receiver clients: single sends, lists and
 * batches, peek-lock and receive-and-delete, complete, abandon, dead-letter (reason and
 * description) and the dead-letter sub-queue, defer and receive-deferred, lock renewal by hand
 * and AutoLockRenewal, scheduled sends and their cancellation, peek, the errors a client sees.
 * Each test owns its queue.
 */
class QueueTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.queue("send-single"),
            Config.queue("send-list"),
            Config.queue("send-batch"),
            Config.queue("peek-lock-complete"),
            Config.queue("receive-and-delete"),
            Config.queue("abandon"),
            Config.queue("dead-letter"),
            Config.queue("max-delivery", "max_delivery_count", 3),
            Config.queue("defer"),
            Config.queue("schedule"),
            Config.queue("peek"),
            Config.queue("properties"),
            Config.queue("too-large", "max_message_size_in_kilobytes", 64),
            Config.queue("many")));

    private static ServiceBusClientBuilder client() {
        return builder(BROKER.connectionString());
    }

    /** A peek-lock receiver without prefetch or automatic lock renewal, so a test sees only what it asked for. */
    private static ServiceBusReceiverClient plainReceiver(ServiceBusClientBuilder client, String queue) {
        return client.receiver().queueName(queue).prefetchCount(0).maxAutoLockRenewDuration(Duration.ZERO)
                .buildClient();
    }

    private static void send(String queue, String... bodies) {
        try (ServiceBusSenderClient sender = client().sender().queueName(queue).buildClient()) {
            sender.sendMessages(List.of(bodies).stream().map(ServiceBusMessage::new).collect(Collectors.toList()));
        }
    }

    @Test
    void sentMessageIsReceivedWithItsBodyAndTheBrokersStamps() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("send-single").buildClient();
                ServiceBusReceiverClient receiver = plainReceiver(client, "send-single")) {
            OffsetDateTime before = OffsetDateTime.now();
            sender.sendMessage(new ServiceBusMessage(BinaryData.fromString("hello java")).setMessageId("m-1"));
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            assertEquals("hello java", message.getBody().toString());
            assertEquals("m-1", message.getMessageId());
            assertEquals(1, message.getSequenceNumber(), "SEQ-1: the first message of a queue is number 1");
            assertEquals(0, message.getDeliveryCount(), "the header's count of earlier deliveries, as the SDK reports it");
            assertNearNow(message.getEnqueuedTime(), Duration.ofSeconds(10), "enqueued time");
            assertFalse(message.getEnqueuedTime().isBefore(before.minusSeconds(2)), "stamped at the broker's accept");
            assertTrue(message.getLockedUntil().isAfter(OffsetDateTime.now().plusSeconds(20)),
                    "locked for the queue's 30 s lock duration: " + message.getLockedUntil());
            assertNotNull(message.getLockToken());
            receiver.complete(message);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void everyPropertyASenderSetsIsDeliveredUnchanged() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("properties").buildClient();
                ServiceBusReceiverClient receiver = plainReceiver(client, "properties")) {
            ServiceBusMessage sent = new ServiceBusMessage(BinaryData.fromBytes(new byte[] {0, 1, 2, (byte) 255}))
                    .setMessageId("id-7").setCorrelationId("corr-7").setSubject("subject-7")
                    .setContentType("application/octet-stream").setReplyTo("replies").setTo("somewhere")
                    .setTimeToLive(Duration.ofMinutes(10));
            sent.getApplicationProperties().put("text", "value");
            sent.getApplicationProperties().put("number", 42);
            sent.getApplicationProperties().put("long", 1L << 40);
            sent.getApplicationProperties().put("double", 1.5);
            sent.getApplicationProperties().put("flag", true);
            sender.sendMessage(sent);
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            assertEquals(List.of((byte) 0, (byte) 1, (byte) 2, (byte) 255), toList(message.getBody().toBytes()));
            assertEquals("id-7", message.getMessageId());
            assertEquals("corr-7", message.getCorrelationId());
            assertEquals("subject-7", message.getSubject());
            assertEquals("application/octet-stream", message.getContentType());
            assertEquals("replies", message.getReplyTo());
            assertEquals("somewhere", message.getTo());
            assertEquals(Duration.ofMinutes(10), message.getTimeToLive());
            assertNearNow(message.getExpiresAt().minusMinutes(10), Duration.ofSeconds(10), "expires-at minus TTL");
            Map<String, Object> properties = message.getApplicationProperties();
            assertEquals("value", properties.get("text"));
            assertEquals(42, properties.get("number"));
            assertEquals(1L << 40, properties.get("long"));
            assertEquals(1.5, properties.get("double"));
            assertEquals(true, properties.get("flag"));
            receiver.complete(message);
        }
    }

    private static List<Byte> toList(byte[] bytes) {
        List<Byte> list = new ArrayList<>();
        for (byte value : bytes) {
            list.add(value);
        }
        return list;
    }

    @Test
    void aListSendEnqueuesEachMessageSeparatelyInOrder() {
        send("send-list", "a", "b", "c", "d");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "send-list")) {
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 4);
            assertEquals(List.of("a", "b", "c", "d"), bodies(received));
            assertEquals(List.of(1L, 2L, 3L, 4L),
                    received.stream().map(ServiceBusReceivedMessage::getSequenceNumber).toList(),
                    "SEQ-1: numbers start at 1 with no gaps");
            received.forEach(receiver::complete);
        }
    }

    @Test
    void aMessageBatchEnqueuesEveryMessageOfTheBatch() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("send-batch").buildClient();
                ServiceBusReceiverClient receiver = plainReceiver(client, "send-batch")) {
            ServiceBusMessageBatch batch = sender.createMessageBatch();
            assertTrue(batch.getMaxSizeInBytes() > 0, "the batch's limit comes from the link's max-message-size");
            for (int index = 0; index < 20; index++) {
                assertTrue(batch.tryAddMessage(new ServiceBusMessage("batched-" + index)), "message " + index);
            }
            sender.sendMessages(batch);
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 20);
            assertEquals(IntStream.range(0, 20).mapToObj(index -> "batched-" + index).toList(), bodies(received));
            received.forEach(receiver::complete);

            // A batch that is full refuses one more message; what it holds is still sent whole.
            ServiceBusMessageBatch small = sender.createMessageBatch(new CreateMessageBatchOptions()
                    .setMaximumSizeInBytes(2048));
            int added = 0;
            while (small.tryAddMessage(new ServiceBusMessage("x".repeat(300)))) {
                added++;
            }
            assertTrue(added >= 1 && added < 7, "a 2 KB batch holds a few 300-byte messages, not " + added);
            sender.sendMessages(small);
            assertEquals(added, receiveExactly(receiver, added).size());
        }
    }

    @Test
    void aCompletedMessageIsNotDeliveredAgain() {
        send("peek-lock-complete", "once");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "peek-lock-complete")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            receiver.complete(message);
            assertNothingToReceive(receiver);
            assertNull(receiver.peekMessage(), "a completed message is gone, not just locked");
        }
    }

    @Test
    void receiveAndDeleteRemovesTheMessageOnDelivery() {
        send("receive-and-delete", "r1", "r2");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = client.receiver().queueName("receive-and-delete")
                .receiveMode(ServiceBusReceiveMode.RECEIVE_AND_DELETE).buildClient()) {
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 2);
            assertEquals(List.of("r1", "r2"), bodies(received));
            assertNull(received.get(0).getLockedUntil(), "a received-and-deleted message holds no lock");
            assertNothingToReceive(receiver);
            assertNull(receiver.peekMessage());
        }
    }

    @Test
    void anAbandonedMessageIsRedeliveredWithItsDeliveryCountIncremented() {
        send("abandon", "again");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "abandon")) {
            ServiceBusReceivedMessage first = receiveExactly(receiver, 1).get(0);
            assertEquals(0, first.getDeliveryCount());
            receiver.abandon(first, new AbandonOptions().setPropertiesToModify(Map.of("attempt", "first")));
            ServiceBusReceivedMessage second = receiveExactly(receiver, 1).get(0);
            assertEquals("again", second.getBody().toString());
            assertEquals(first.getSequenceNumber(), second.getSequenceNumber());
            assertEquals(1, second.getDeliveryCount());
            assertEquals("first", second.getApplicationProperties().get("attempt"),
                    "properties to modify are merged into the message on abandon");
            receiver.complete(second);
        }
    }

    @Test
    void aDeadLetteredMessageMovesToTheDeadLetterQueueWithReasonAndDescription() {
        send("dead-letter", "poison");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = plainReceiver(client, "dead-letter");
                ServiceBusReceiverClient deadLetters = client.receiver().queueName("dead-letter")
                        .subQueue(SubQueue.DEAD_LETTER_QUEUE).prefetchCount(0).buildClient()) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            receiver.deadLetter(message, new DeadLetterOptions().setDeadLetterReason("bad-input")
                    .setDeadLetterErrorDescription("the body is not an order")
                    .setPropertiesToModify(Map.of("checked-by", "java")));
            assertNothingToReceive(receiver);
            assertEquals("dead-letter/$deadletterqueue", deadLetters.getEntityPath());
            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("poison", dead.getBody().toString());
            assertEquals(message.getSequenceNumber(), dead.getSequenceNumber());
            assertEquals("bad-input", dead.getDeadLetterReason());
            assertEquals("the body is not an order", dead.getDeadLetterErrorDescription());
            assertEquals("java", dead.getApplicationProperties().get("checked-by"));
            deadLetters.complete(dead);
            assertNothingToReceive(deadLetters);
        }
    }

    @Test
    void aMessageAbandonedUpToMaxDeliveryCountIsDeadLettered() {
        send("max-delivery", "fragile");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = plainReceiver(client, "max-delivery");
                ServiceBusReceiverClient deadLetters = client.receiver().queueName("max-delivery")
                        .subQueue(SubQueue.DEAD_LETTER_QUEUE).prefetchCount(0).buildClient()) {
            for (int attempt = 0; attempt < 3; attempt++) {
                ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
                assertEquals(attempt, message.getDeliveryCount());
                receiver.abandon(message);
            }
            assertNothingToReceive(receiver);
            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("MaxDeliveryCountExceeded", dead.getDeadLetterReason());
            assertEquals("fragile", dead.getBody().toString());
            deadLetters.complete(dead);
        }
    }

    @Test
    void aDeferredMessageIsSkippedAndRetrievableByItsSequenceNumber() {
        send("defer", "later", "now");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "defer")) {
            ServiceBusReceivedMessage deferred = receiveExactly(receiver, 1).get(0);
            assertEquals("later", deferred.getBody().toString());
            receiver.defer(deferred);
            ServiceBusReceivedMessage next = receiveExactly(receiver, 1).get(0);
            assertEquals("now", next.getBody().toString());
            receiver.complete(next);
            assertNothingToReceive(receiver);

            ServiceBusReceivedMessage peeked = receiver.peekMessage(deferred.getSequenceNumber());
            assertEquals(ServiceBusMessageState.DEFERRED, peeked.getState());

            ServiceBusReceivedMessage back = receiver.receiveDeferredMessage(deferred.getSequenceNumber());
            assertEquals("later", back.getBody().toString());
            assertEquals(ServiceBusMessageState.DEFERRED, back.getState());
            assertNotNull(back.getLockedUntil());
            receiver.complete(back);
            // The broker answers com.microsoft:message-not-found, which the Java SDK reads as
            // "no message" (ManagementChannel.sendWithVerify): an empty batch.
            List<ServiceBusReceivedMessage> none = new ArrayList<>();
            receiver.receiveDeferredMessageBatch(List.of(deferred.getSequenceNumber())).forEach(none::add);
            assertEquals(List.of(), none);
        }
    }

    @Test
    void aScheduledMessageWaitsAndCanBeCancelled() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("schedule").buildClient();
                ServiceBusReceiverClient receiver = plainReceiver(client, "schedule")) {
            OffsetDateTime later = OffsetDateTime.now().plusHours(1);
            long kept = sender.scheduleMessage(new ServiceBusMessage("kept"), later);
            List<Long> both = new ArrayList<>();
            sender.scheduleMessages(List.of(new ServiceBusMessage("gone-1"), new ServiceBusMessage("gone-2")), later)
                    .forEach(both::add);
            assertEquals(2, both.size());
            assertTrue(kept > 0 && both.stream().allMatch(number -> number > kept));

            ServiceBusReceivedMessage peeked = receiver.peekMessage(kept);
            assertEquals(ServiceBusMessageState.SCHEDULED, peeked.getState());
            assertEquals(later.toInstant().toEpochMilli() / 1000,
                    peeked.getScheduledEnqueueTime().toInstant().toEpochMilli() / 1000);
            assertNothingToReceive(receiver);

            sender.cancelScheduledMessages(both);
            sender.cancelScheduledMessage(kept);
            assertNull(receiver.peekMessage(1), "cancelled scheduled messages are gone");
        }
    }

    @Test
    void peekShowsMessagesWithoutLockingThem() {
        send("peek", "p1", "p2", "p3");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "peek")) {
            ServiceBusReceivedMessage first = receiver.peekMessage();
            assertEquals("p1", first.getBody().toString());
            assertNull(first.getLockedUntil(), "peek takes no lock");
            List<ServiceBusReceivedMessage> fromTwo = new ArrayList<>();
            receiver.peekMessages(10, 2).forEach(fromTwo::add);
            assertEquals(List.of("p2", "p3"), bodies(fromTwo));
            assertEquals(ServiceBusMessageState.ACTIVE, fromTwo.get(0).getState());
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 3);
            assertEquals(List.of("p1", "p2", "p3"), bodies(received), "peeked messages are still delivered");
            received.forEach(receiver::complete);
        }
    }

    @Test
    void aSenderToAnUnknownQueueGetsEntityNotFound() {
        try (ServiceBusSenderClient sender = client().sender().queueName("no-such-queue").buildClient()) {
            assertServiceBusError(ServiceBusFailureReason.MESSAGING_ENTITY_NOT_FOUND,
                    () -> sender.sendMessage(new ServiceBusMessage("lost")));
        }
    }

    @Test
    void aMessageOverTheSizeLimitIsRefused() {
        try (ServiceBusSenderClient sender = client().sender().queueName("too-large").buildClient()) {
            assertServiceBusError(ServiceBusFailureReason.MESSAGE_SIZE_EXCEEDED,
                    () -> sender.sendMessage(new ServiceBusMessage(BinaryData.fromBytes(new byte[100 * 1024]))));
            sender.sendMessage(new ServiceBusMessage(BinaryData.fromBytes(new byte[10 * 1024])));
        }
    }

    @Test
    void manyMessagesRoundTripWithoutLossOrDuplicates() {
        int count = 300;
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("many").buildClient();
                ServiceBusReceiverClient receiver = client.receiver().queueName("many").prefetchCount(50)
                        .buildClient()) {
            List<ServiceBusMessage> messages = IntStream.range(0, count)
                    .mapToObj(index -> new ServiceBusMessage("n" + index)).toList();
            for (int start = 0; start < count; start += 100) {
                sender.sendMessages(messages.subList(start, start + 100));
            }
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, count, Duration.ofSeconds(30));
            received.forEach(receiver::complete);
            assertEquals(IntStream.range(0, count).mapToObj(index -> "n" + index).toList(), bodies(received));
            assertNothingToReceive(receiver);
        }
    }
}
