package ferrobus;

import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.assertServiceBusError;
import static ferrobus.Sdk.bodies;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusErrorContext;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusProcessorClient;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusSessionReceiverClient;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import com.azure.messaging.servicebus.models.SubQueue;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Sessions through ServiceBusSessionReceiverClient (acceptSession, acceptNextSession), session
 * state, session lock renewal and expiry, settlement inside a session, and the session processor.
 */
class SessionTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.queue("session-refuse", "requires_session", true),
            Config.queue("session-named", "requires_session", true),
            Config.queue("session-next", "requires_session", true),
            Config.queue("session-empty", "requires_session", true),
            Config.queue("session-exclusive", "requires_session", true),
            Config.queue("session-state", "requires_session", true),
            Config.queue("session-renew", "requires_session", true, "lock_duration", "4s"),
            Config.queue("session-expiry", "requires_session", true, "lock_duration", "2s"),
            Config.queue("session-settle", "requires_session", true),
            Config.queue("session-processor", "requires_session", true),
            Config.topic("session-topic", new String[] {"ordered"}, "requires_session", true)));

    private static ServiceBusClientBuilder client() {
        return builder(BROKER.connectionString());
    }

    private static ServiceBusSessionReceiverClient sessions(ServiceBusClientBuilder client, String queue) {
        return client.sessionReceiver().queueName(queue).buildClient();
    }

    private static void sendToSession(String queue, String sessionId, String... bodies) {
        try (ServiceBusSenderClient sender = client().sender().queueName(queue).buildClient()) {
            List<ServiceBusMessage> messages = new ArrayList<>();
            for (String body : bodies) {
                messages.add(new ServiceBusMessage(body).setSessionId(sessionId));
            }
            sender.sendMessages(messages);
        }
    }

    @Test
    void aMessageWithoutSessionIdIsRefusedBySessionQueueAndNothingIsEnqueued() {
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName("session-refuse").buildClient()) {
            Throwable error = assertThrows(Throwable.class, () -> sender.sendMessage(new ServiceBusMessage("no session")));
            assertTrue(String.valueOf(error.getMessage()).toLowerCase().contains("session"),
                    "the refusal names the missing session id: " + error);
            try (ServiceBusReceiverClient peeker = client.receiver().queueName("session-refuse").buildClient()) {
                assertNull(peeker.peekMessage(), "nothing was enqueued");
            }
        }
    }

    @Test
    void acceptSessionGetsOnlyItsSessionInSequenceOrder() {
        sendToSession("session-named", "a", "a1", "a2");
        sendToSession("session-named", "b", "b1");
        sendToSession("session-named", "a", "a3");
        ServiceBusSessionReceiverClient sessions = sessions(client(), "session-named");
        try (ServiceBusReceiverClient receiver = sessions.acceptSession("a")) {
            assertEquals("a", receiver.getSessionId());
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 3);
            assertEquals(List.of("a1", "a2", "a3"), bodies(received));
            received.forEach(message -> assertEquals("a", message.getSessionId()));
            received.forEach(receiver::complete);
            assertNothingToReceive(receiver);
        } finally {
            sessions.close();
        }
    }

    @Test
    void acceptNextSessionTakesADifferentSessionWithMessagesEachTime() {
        sendToSession("session-next", "x", "x1");
        sendToSession("session-next", "y", "y1");
        ServiceBusSessionReceiverClient sessions = sessions(client(), "session-next");
        try (ServiceBusReceiverClient first = sessions.acceptNextSession();
                ServiceBusReceiverClient second = sessions.acceptNextSession()) {
            assertEquals(Set.of("x", "y"), Set.of(first.getSessionId(), second.getSessionId()));
            assertNotEquals(first.getSessionId(), second.getSessionId());
            for (ServiceBusReceiverClient receiver : List.of(first, second)) {
                ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
                assertEquals(receiver.getSessionId() + "1", message.getBody().toString());
                receiver.complete(message);
            }
        } finally {
            sessions.close();
        }
    }

    @Test
    void acceptNextSessionOnAnEmptyQueueTimesOut() {
        ServiceBusClientBuilder client = new ServiceBusClientBuilder().connectionString(BROKER.connectionString())
                .retryOptions(Sdk.noRetries().setTryTimeout(Duration.ofSeconds(3)));
        ServiceBusSessionReceiverClient sessions = sessions(client, "session-empty");
        try {
            long started = System.nanoTime();
            Throwable error = assertThrows(Throwable.class, sessions::acceptNextSession);
            long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - started);
            assertTrue(seconds < 30, "gave up after " + seconds + " s: " + error);
        } finally {
            sessions.close();
        }
    }

    @Test
    void aLockedSessionCannotBeAcceptedUntilItsReceiverCloses() {
        sendToSession("session-exclusive", "only", "o1");
        ServiceBusSessionReceiverClient sessions = sessions(client(), "session-exclusive");
        ServiceBusSessionReceiverClient rivals = sessions(client(), "session-exclusive");
        try {
            ServiceBusReceiverClient holder = sessions.acceptSession("only");
            Sdk.assertSessionCannotBeLocked(() -> rivals.acceptSession("only"));
            holder.close();
            try (ServiceBusReceiverClient next = rivals.acceptSession("only")) {
                ServiceBusReceivedMessage message = receiveExactly(next, 1).get(0);
                assertEquals("o1", message.getBody().toString());
                next.complete(message);
            }
        } finally {
            sessions.close();
            rivals.close();
        }
    }

    @Test
    void sessionStateIsKeptPerSessionAcrossReceiversAndCanBeCleared() {
        sendToSession("session-state", "s1", "m");
        sendToSession("session-state", "s2", "m");
        ServiceBusSessionReceiverClient sessions = sessions(client(), "session-state");
        try {
            try (ServiceBusReceiverClient receiver = sessions.acceptSession("s1")) {
                assertNull(receiver.getSessionState(), "a new session has no state");
                receiver.setSessionState("step-2".getBytes(StandardCharsets.UTF_8));
            }
            try (ServiceBusReceiverClient receiver = sessions.acceptSession("s2")) {
                assertNull(receiver.getSessionState(), "state belongs to its own session");
            }
            try (ServiceBusReceiverClient receiver = sessions.acceptSession("s1")) {
                assertArrayEquals("step-2".getBytes(StandardCharsets.UTF_8), receiver.getSessionState());
                receiver.setSessionState(null);
                assertNull(receiver.getSessionState(), "setting null clears the state");
            }
        } finally {
            sessions.close();
        }
    }

    @Test
    void renewSessionLockHoldsTheSessionPastItsOriginalExpiry() throws InterruptedException {
        sendToSession("session-renew", "r", "r1");
        ServiceBusClientBuilder client = client();
        ServiceBusSessionReceiverClient sessions = client.sessionReceiver().queueName("session-renew")
                .maxAutoLockRenewDuration(Duration.ZERO).buildClient();
        ServiceBusSessionReceiverClient rivals = sessions(client(), "session-renew");
        try (ServiceBusReceiverClient receiver = sessions.acceptSession("r")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            OffsetDateTime original = message.getLockedUntil();
            Thread.sleep(2000);
            OffsetDateTime renewed = receiver.renewSessionLock();
            assertTrue(renewed.isAfter(original), "renewed " + renewed + " after " + original);
            Thread.sleep(Duration.between(OffsetDateTime.now(), original).toMillis() + 500);
            Sdk.assertSessionCannotBeLocked(() -> rivals.acceptSession("r"));
            receiver.complete(message);
        } finally {
            sessions.close();
            rivals.close();
        }
    }

    @Test
    void anExpiredSessionLockLosesSettlementAndFreesTheSession() throws InterruptedException {
        sendToSession("session-expiry", "e", "e1");
        ServiceBusSessionReceiverClient sessions = client().sessionReceiver().queueName("session-expiry")
                .maxAutoLockRenewDuration(Duration.ZERO).buildClient();
        ServiceBusSessionReceiverClient rivals = sessions(client(), "session-expiry");
        try (ServiceBusReceiverClient receiver = sessions.acceptSession("e")) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            Thread.sleep(Duration.between(OffsetDateTime.now(), message.getLockedUntil()).toMillis() + 700);
            assertServiceBusError(ServiceBusFailureReason.SESSION_LOCK_LOST, () -> receiver.complete(message));
            try (ServiceBusReceiverClient next = rivals.acceptSession("e")) {
                ServiceBusReceivedMessage again = receiveExactly(next, 1).get(0);
                assertEquals("e1", again.getBody().toString());
                next.complete(again);
            }
        } finally {
            sessions.close();
            rivals.close();
        }
    }

    @Test
    void abandonDeadLetterAndDeferInsideASession() {
        sendToSession("session-settle", "z", "first", "second", "third");
        ServiceBusClientBuilder client = client();
        ServiceBusSessionReceiverClient sessions = sessions(client, "session-settle");
        try (ServiceBusReceiverClient receiver = sessions.acceptSession("z");
                ServiceBusReceiverClient deadLetters = client.receiver().queueName("session-settle")
                        .subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(10).forEach(peeked::add);
            assertEquals(List.of("first", "second", "third"), bodies(peeked), "peek shows the session's messages");

            ServiceBusReceivedMessage first = receiveExactly(receiver, 1).get(0);
            receiver.abandon(first);
            ServiceBusReceivedMessage again = receiveExactly(receiver, 1).get(0);
            assertEquals("first", again.getBody().toString(), "an abandoned session message comes back first");
            assertEquals(1, again.getDeliveryCount());
            receiver.deadLetter(again, new DeadLetterOptions().setDeadLetterReason("why")
                    .setDeadLetterErrorDescription("because"));

            ServiceBusReceivedMessage second = receiveExactly(receiver, 1).get(0);
            receiver.defer(second);
            ServiceBusReceivedMessage third = receiveExactly(receiver, 1).get(0);
            assertEquals("third", third.getBody().toString());
            receiver.complete(third);
            ServiceBusReceivedMessage deferred = receiver.receiveDeferredMessage(second.getSequenceNumber());
            assertEquals("second", deferred.getBody().toString());
            receiver.complete(deferred);

            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("z", dead.getSessionId(), "a dead-lettered session message keeps its session id");
            assertEquals("why", dead.getDeadLetterReason());
            assertEquals("because", dead.getDeadLetterErrorDescription());
            deadLetters.complete(dead);
        } finally {
            sessions.close();
        }
    }

    @Test
    void theSessionProcessorHandlesEverySessionInOrder() throws InterruptedException {
        for (String session : List.of("p1", "p2", "p3")) {
            sendToSession("session-processor", session, session + "-0", session + "-1", session + "-2");
        }
        Map<String, List<String>> seen = new ConcurrentHashMap<>();
        List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch all = new CountDownLatch(9);
        ServiceBusProcessorClient processor = client().sessionProcessor().queueName("session-processor")
                .maxConcurrentSessions(2)
                // A session's receiver moves on once its session has been idle this long.
                .sessionIdleTimeout(Duration.ofSeconds(1))
                .processMessage(context -> {
                    ServiceBusReceivedMessage message = context.getMessage();
                    seen.computeIfAbsent(message.getSessionId(), key -> Collections.synchronizedList(new ArrayList<>()))
                            .add(message.getBody().toString());
                    all.countDown();
                })
                .processError((ServiceBusErrorContext context) -> errors.add(context.getException()))
                .buildProcessorClient();
        try (ServiceBusReceiverClient peeker = client().receiver().queueName("session-processor").buildClient()) {
            processor.start();
            assertTrue(all.await(30, TimeUnit.SECONDS), "all nine messages processed; seen " + seen);
            // Each message is completed after its handler returns.
            Sdk.eventually(Duration.ofSeconds(10), "the processor completing every message",
                    () -> peeker.peekMessage() == null);
        } finally {
            processor.close();
        }
        Map<String, List<String>> expected = new TreeMap<>();
        for (String session : List.of("p1", "p2", "p3")) {
            expected.put(session, List.of(session + "-0", session + "-1", session + "-2"));
        }
        assertEquals(expected, new TreeMap<>(seen));
        assertEquals(List.of(), errors);
    }

    @Test
    void sessionMessagesThroughATopicReachASessionSubscription() {
        try (ServiceBusSenderClient sender = client().sender().topicName("session-topic").buildClient()) {
            sender.sendMessages(List.of(new ServiceBusMessage("t1").setSessionId("k"),
                    new ServiceBusMessage("t2").setSessionId("k")));
        }
        ServiceBusSessionReceiverClient sessions = client().sessionReceiver().topicName("session-topic")
                .subscriptionName("ordered").buildClient();
        try (ServiceBusReceiverClient receiver = sessions.acceptNextSession()) {
            assertEquals("k", receiver.getSessionId());
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 2);
            assertEquals(List.of("t1", "t2"), bodies(received));
            received.forEach(receiver::complete);
        } finally {
            sessions.close();
        }
    }
}
