package ferrobus;

import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.assertServiceBusError;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Time on queues through the Java SDK: lock expiry and the lost lock, renewMessageLock,
 * AutoLockRenewal (a receiver's maxAutoLockRenewDuration, renewMessageLock with a duration,
 * the processor's), and a scheduled message arriving at its time. Each test owns its queue.
 */
class LockTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.queue("lock-expiry", "lock_duration", "2s"),
            Config.queue("lock-renew", "lock_duration", "8s"),
            Config.queue("auto-lock-renew", "lock_duration", "3s"),
            Config.queue("schedule-due"),
            Config.queue("processor", "lock_duration", "3s")));

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
    void anExpiredLockRedeliversTheMessageAndTheOldLockIsLost() throws InterruptedException {
        send("lock-expiry", "slow");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "lock-expiry")) {
            ServiceBusReceivedMessage first = receiveExactly(receiver, 1).get(0);
            // The 2 s lock lapses while nothing renews it.
            ServiceBusReceivedMessage second = receiveExactly(receiver, 1, Duration.ofSeconds(10)).get(0);
            assertEquals(first.getSequenceNumber(), second.getSequenceNumber());
            assertEquals(1, second.getDeliveryCount(), "LCK-2: a lapsed lock counts as a delivery");
            assertServiceBusError(ServiceBusFailureReason.MESSAGE_LOCK_LOST, () -> receiver.complete(first));
            receiver.complete(second);
        }
    }

    @Test
    void renewMessageLockExtendsLockedUntilAndHoldsPastTheOriginalExpiry() throws InterruptedException {
        send("lock-renew", "held");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "lock-renew")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            OffsetDateTime original = message.getLockedUntil();
            Thread.sleep(4000); // half the lock: the renewed lock ends 4 s after the original
            OffsetDateTime renewed = receiver.renewMessageLock(message);
            assertTrue(renewed.isAfter(original), "renewed " + renewed + " after " + original);
            // Past the original expiry the renewed lock still holds: nobody else gets the message.
            Thread.sleep(Duration.between(OffsetDateTime.now(), original).toMillis() + 500);
            assertNothingToReceive(receiver);
            receiver.complete(message);
        }
    }

    @Test
    void autoLockRenewalKeepsAMessageLockedPastSeveralLockDurations() throws InterruptedException {
        send("auto-lock-renew", "long work");
        ServiceBusClientBuilder client = client();
        // The receiver renews every message's lock in the background for up to 30 s; the queue's
        // lock lasts 3 s.
        try (ServiceBusReceiverClient receiver = client.receiver().queueName("auto-lock-renew").prefetchCount(0)
                .maxAutoLockRenewDuration(Duration.ofSeconds(30)).buildClient();
                ServiceBusReceiverClient other = plainReceiver(client, "auto-lock-renew")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            OffsetDateTime firstLock = message.getLockedUntil();
            Thread.sleep(5000); // the work: more than one and a half lock durations
            assertNothingToReceive(other);
            assertTrue(message.getLockedUntil().isAfter(firstLock),
                    "the background renewal moved lockedUntil: " + message.getLockedUntil() + " vs " + firstLock);
            receiver.complete(message);
            assertNothingToReceive(other);
        }
        // And the explicit form: renewMessageLock(message, maxLockRenewalDuration, onError).
        send("auto-lock-renew", "explicit");
        try (ServiceBusReceiverClient receiver = plainReceiver(client(), "auto-lock-renew")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            List<Throwable> errors = new ArrayList<>();
            receiver.renewMessageLock(message, Duration.ofSeconds(20), errors::add);
            Thread.sleep(4500);
            receiver.complete(message);
            assertEquals(List.of(), errors);
        }
    }

    @Test
    void aScheduledMessageArrivesAtItsTimeAndNotBefore() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("schedule-due").buildClient();
                ServiceBusReceiverClient receiver = plainReceiver(client, "schedule-due")) {
            OffsetDateTime due = OffsetDateTime.now().plusSeconds(3);
            sender.scheduleMessage(new ServiceBusMessage("due"), due);
            assertNothingToReceive(receiver);
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1, Duration.ofSeconds(10)).get(0);
            assertFalse(OffsetDateTime.now().isBefore(due.minusNanos(200_000_000)), "not delivered before its time");
            assertEquals("due", message.getBody().toString());
            assertEquals(due.toInstant().toEpochMilli() / 1000,
                    message.getScheduledEnqueueTime().toInstant().toEpochMilli() / 1000);
            receiver.complete(message);
        }
    }

    @Test
    void theProcessorHandlesEveryMessageAndRenewsLocksPastTheLockDuration() throws InterruptedException {
        send("processor", "slow", "q1", "q2", "q3");
        List<String> handled = Collections.synchronizedList(new ArrayList<>());
        List<Long> deliveryCounts = Collections.synchronizedList(new ArrayList<>());
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch all = new CountDownLatch(4);
        ServiceBusProcessorClient processor = client().processor().queueName("processor")
                .maxConcurrentCalls(1)
                // The queue's lock lasts 3 s; the first message takes 5 s to handle.
                .maxAutoLockRenewDuration(Duration.ofSeconds(30))
                .processMessage(context -> {
                    ServiceBusReceivedMessage message = context.getMessage();
                    if (message.getBody().toString().equals("slow")) {
                        try {
                            Thread.sleep(5000); // the work, longer than the lock duration
                        } catch (InterruptedException interrupted) {
                            Thread.currentThread().interrupt();
                        }
                    }
                    handled.add(message.getBody().toString());
                    deliveryCounts.add(message.getDeliveryCount());
                    all.countDown();
                })
                .processError(context -> errors.add(context.getException()))
                .buildProcessorClient();
        try (ServiceBusReceiverClient peeker = plainReceiver(client(), "processor")) {
            processor.start();
            assertTrue(all.await(40, TimeUnit.SECONDS), "handled " + handled);
            // Each message is completed after its handler returns.
            Sdk.eventually(Duration.ofSeconds(10), "the processor completing every message",
                    () -> peeker.peekMessage() == null);
        } finally {
            processor.close();
        }
        assertEquals(List.of("slow", "q1", "q2", "q3"), handled);
        assertEquals(List.of(0L, 0L, 0L, 0L), deliveryCounts, "no message was delivered twice: the lock held");
        assertEquals(List.of(), errors);
    }
}
