package ferrobus;

import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.bodies;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusTransactionContext;
import com.azure.messaging.servicebus.models.CompleteOptions;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.SubQueue;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * AMQP transactions through the Java SDK (rules TXN-1..3): createTransaction,
 * commitTransaction and rollbackTransaction on senders and receivers; sends, completes and
 * dead-letters under a transaction; cross-entity transactions (send-via) with
 * enableCrossEntityTransactions. Clients built from one builder share its connection, as a
 * transaction needs.
 */
class TransactionTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.queue("txn-send-commit"),
            Config.queue("txn-send-rollback"),
            Config.queue("txn-same-entity"),
            Config.queue("txn-rollback-settle", "lock_duration", "2s"),
            Config.queue("txn-dead-letter"),
            Config.queue("txn-via-in"),
            Config.queue("txn-via-out"),
            Config.queue("txn-other-in"),
            Config.queue("txn-other-out")));

    private static ServiceBusClientBuilder client() {
        return builder(BROKER.connectionString());
    }

    private static ServiceBusReceiverClient receiver(ServiceBusClientBuilder client, String queue) {
        return client.receiver().queueName(queue).prefetchCount(0).maxAutoLockRenewDuration(Duration.ZERO)
                .buildClient();
    }

    private static void send(String queue, String body) {
        try (ServiceBusSenderClient sender = client().sender().queueName(queue).buildClient()) {
            sender.sendMessage(new ServiceBusMessage(body));
        }
    }

    @Test
    void messagesSentInACommittedTransactionArriveInOrderAtCommit() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("txn-send-commit").buildClient();
                ServiceBusReceiverClient receiver = receiver(client, "txn-send-commit")) {
            ServiceBusTransactionContext transaction = sender.createTransaction();
            assertNotNull(transaction.getTransactionId());
            for (int index = 0; index < 10; index++) {
                sender.sendMessage(new ServiceBusMessage("t" + index), transaction);
            }
            assertNull(receiver.peekMessage(), "TXN-1: nothing is visible before the commit");
            sender.commitTransaction(transaction);
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 10);
            assertEquals(IntStream.range(0, 10).mapToObj(index -> "t" + index).toList(), bodies(received));
            received.forEach(receiver::complete);
        }
    }

    @Test
    void aRolledBackTransactionSendsNothing() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("txn-send-rollback").buildClient();
                ServiceBusReceiverClient receiver = receiver(client, "txn-send-rollback")) {
            ServiceBusTransactionContext transaction = sender.createTransaction();
            sender.sendMessages(List.of(new ServiceBusMessage("r1"), new ServiceBusMessage("r2")), transaction);
            sender.rollbackTransaction(transaction);
            sender.sendMessage(new ServiceBusMessage("outside"));
            ServiceBusReceivedMessage only = receiveExactly(receiver, 1).get(0);
            assertEquals("outside", only.getBody().toString());
            receiver.complete(only);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void receiveCompleteAndSendOnOneEntityCommitTogether() {
        send("txn-same-entity", "order-1");
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("txn-same-entity").buildClient();
                ServiceBusReceiverClient receiver = receiver(client, "txn-same-entity")) {
            ServiceBusReceivedMessage order = receiveExactly(receiver, 1).get(0);
            ServiceBusTransactionContext transaction = receiver.createTransaction();
            receiver.complete(order, new CompleteOptions().setTransactionContext(transaction));
            sender.sendMessage(new ServiceBusMessage("result of order-1"), transaction);
            receiver.commitTransaction(transaction);
            ServiceBusReceivedMessage result = receiveExactly(receiver, 1).get(0);
            assertEquals("result of order-1", result.getBody().toString());
            receiver.complete(result);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void aRolledBackCompleteLeavesTheMessageLockedUntilItsLockLapses() {
        send("txn-rollback-settle", "kept");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = receiver(client, "txn-rollback-settle")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            ServiceBusTransactionContext transaction = receiver.createTransaction();
            receiver.complete(message, new CompleteOptions().setTransactionContext(transaction));
            receiver.rollbackTransaction(transaction);
            // The completion was discarded: the message comes back once its 2 s lock lapses.
            ServiceBusReceivedMessage again = receiveExactly(receiver, 1, Duration.ofSeconds(10)).get(0);
            assertEquals(message.getSequenceNumber(), again.getSequenceNumber());
            assertEquals(1, again.getDeliveryCount());
            receiver.complete(again);
        }
    }

    @Test
    void aDeadLetterInACommittedTransactionMovesTheMessage() {
        send("txn-dead-letter", "poison");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = receiver(client, "txn-dead-letter");
                ServiceBusReceiverClient deadLetters = client().receiver().queueName("txn-dead-letter")
                        .subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            ServiceBusTransactionContext transaction = receiver.createTransaction();
            receiver.deadLetter(message, new DeadLetterOptions().setDeadLetterReason("txn-reason")
                    .setDeadLetterErrorDescription("in a transaction")
                    .setPropertiesToModify(Map.of("moved", "yes"))
                    .setTransactionContext(transaction));
            assertNull(deadLetters.peekMessage(), "not moved before the commit");
            receiver.commitTransaction(transaction);
            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("txn-reason", dead.getDeadLetterReason());
            assertEquals("in a transaction", dead.getDeadLetterErrorDescription());
            assertEquals("yes", dead.getApplicationProperties().get("moved"));
            deadLetters.complete(dead);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void aCrossEntityTransactionCompletesOnOneQueueAndSendsToAnotherViaIt() {
        send("txn-via-in", "order-2");
        ServiceBusClientBuilder client = client().enableCrossEntityTransactions();
        try (ServiceBusReceiverClient receiver = receiver(client, "txn-via-in");
                ServiceBusSenderClient sender = client.sender().queueName("txn-via-out").buildClient()) {
            // The first entity used (txn-via-in, by a receive) carries the sends to txn-via-out.
            ServiceBusReceivedMessage order = receiveExactly(receiver, 1).get(0);
            ServiceBusTransactionContext transaction = receiver.createTransaction();
            receiver.complete(order, new CompleteOptions().setTransactionContext(transaction));
            sender.sendMessage(new ServiceBusMessage("result of order-2"), transaction);
            receiver.commitTransaction(transaction);
        }
        try (ServiceBusReceiverClient out = receiver(client(), "txn-via-out");
                ServiceBusReceiverClient in = receiver(client(), "txn-via-in")) {
            ServiceBusReceivedMessage result = receiveExactly(out, 1).get(0);
            assertEquals("result of order-2", result.getBody().toString());
            out.complete(result);
            assertNothingToReceive(in);
        }
    }

    @Test
    void aTransactionSpanningTwoEntitiesWithoutSendViaIsRefusedAndChangesNothing() {
        send("txn-other-in", "order-3");
        ServiceBusClientBuilder client = client();
        try (ServiceBusReceiverClient receiver = receiver(client, "txn-other-in");
                ServiceBusSenderClient sender = client.sender().queueName("txn-other-out").buildClient()) {
            ServiceBusReceivedMessage order = receiveExactly(receiver, 1).get(0);
            ServiceBusTransactionContext transaction = receiver.createTransaction();
            receiver.complete(order, new CompleteOptions().setTransactionContext(transaction));
            // As in the cloud, a transaction works on one entity unless sends go through it.
            assertThrows(Throwable.class, () -> {
                sender.sendMessage(new ServiceBusMessage("elsewhere"), transaction);
                receiver.commitTransaction(transaction);
            });
        }
        try (ServiceBusReceiverClient out = receiver(client(), "txn-other-out")) {
            assertNothingToReceive(out);
        }
    }
}
