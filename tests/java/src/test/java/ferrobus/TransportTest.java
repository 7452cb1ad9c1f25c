package ferrobus;

import static ferrobus.Sdk.bodies;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.amqp.AmqpTransportType;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.ServiceBusSessionReceiverClient;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;
import javax.net.ssl.SSLContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * AMQP over TLS and over WebSockets, the way the Java SDK connects to the cloud service: the
 * connection string without UseDevelopmentEmulator (TLS; wss with AMQP_WEB_SOCKETS), its
 * Endpoint naming {@code localhost:PORT}, and the development CA trusted through the JVM's
 * default SSLContext (built here from {@code <data_dir>/dev-ca.pem}, as a user's
 * {@code -Djavax.net.ssl.trustStore} would do). Also plain ws with UseDevelopmentEmulator, and
 * a CA that is not trusted. Both auth modes: with keys the CBS tokens are checked over every
 * transport.
 */
class TransportTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(Broker.durable(String.join("",
            "[tls]\nlisten = \"127.0.0.1:0\"\n[websocket]\nlisten = \"127.0.0.1:0\"\n",
            Config.queue("tls-q"),
            Config.queue("tls-main-port-q"),
            Config.queue("ws-q"),
            Config.queue("ws-session-q", "requires_session", true),
            Config.queue("ws-plain-q"),
            Config.queue("untrusted-q"))));

    private static SSLContext jvmDefault;


    @BeforeAll
    static void trustTheDevelopmentCa() throws Exception {
        jvmDefault = SSLContext.getDefault();
        Sdk.trustForAmqp(Sdk.developmentCa(BROKER.broker()));
    }

    @AfterAll
    static void restoreTheJvmDefault() {
        SSLContext.setDefault(jvmDefault);
    }

    private static ServiceBusClientBuilder tls(int port) {
        return new ServiceBusClientBuilder().connectionString(Broker.cloudConnectionString(port))
                .retryOptions(Sdk.noRetries());
    }

    private static ServiceBusClientBuilder webSockets(int port) {
        return tls(port).transportType(AmqpTransportType.AMQP_WEB_SOCKETS);
    }

    /** Sends {@code count} messages, receives and completes them; returns their bodies. */
    private static List<String> roundTrip(ServiceBusClientBuilder client, String queue, int count) {
        try (ServiceBusSenderClient sender = client.sender().queueName(queue).buildClient();
                ServiceBusReceiverClient receiver = client.receiver().queueName(queue).buildClient()) {
            sender.sendMessages(IntStream.range(0, count).mapToObj(index -> new ServiceBusMessage(queue + "-" + index))
                    .toList());
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, count);
            received.forEach(receiver::complete);
            assertNull(receiver.peekMessage(), "completed messages are gone");
            return bodies(received);
        }
    }

    private static List<String> expected(String queue, int count) {
        return IntStream.range(0, count).mapToObj(index -> queue + "-" + index).toList();
    }

    @Test
    void sendReceiveAndSettleOverTlsOnTheAmqpsListener() throws InterruptedException {
        assertEquals(expected("tls-q", 5), roundTrip(tls(BROKER.broker().tlsPort()), "tls-q", 5));
    }

    @Test
    void tlsOnTheMainPortIsToldApartFromPlainAmqp() {
        assertEquals(expected("tls-main-port-q", 3),
                roundTrip(tls(BROKER.broker().port()), "tls-main-port-q", 3));
    }

    @Test
    void webSocketsCarrySessionsAndManagementOperations() throws InterruptedException {
        ServiceBusClientBuilder client = webSockets(BROKER.broker().webSocketPort());
        try (ServiceBusSenderClient sender = client.sender().queueName("ws-session-q").buildClient()) {
            sender.sendMessages(IntStream.range(0, 3)
                    .mapToObj(index -> new ServiceBusMessage("s" + index).setSessionId("ws-a")).toList());
            long scheduled = sender.scheduleMessage(new ServiceBusMessage("later").setSessionId("ws-a"),
                    OffsetDateTime.now().plusHours(1));
            assertTrue(scheduled > 0);
        }
        ServiceBusSessionReceiverClient sessions = client.sessionReceiver().queueName("ws-session-q").buildClient();
        try (ServiceBusReceiverClient receiver = sessions.acceptNextSession()) {
            assertEquals("ws-a", receiver.getSessionId());
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 3);
            assertEquals(List.of("s0", "s1", "s2"), bodies(received));
            received.forEach(receiver::complete);
            receiver.setSessionState(new byte[] {1, 2, 3});
            List<ServiceBusReceivedMessage> peeked = new ArrayList<>();
            receiver.peekMessages(5).forEach(peeked::add);
            assertEquals(1, peeked.size());
            assertEquals(ServiceBusMessageState.SCHEDULED, peeked.get(0).getState());
        } finally {
            sessions.close();
        }
        assertEquals(expected("ws-q", 4), roundTrip(client, "ws-q", 4));
    }

    @Test
    void plainWebSocketsWithTheEmulatorConnectionString() {
        ServiceBusClientBuilder client = new ServiceBusClientBuilder()
                .connectionString(BROKER.connectionString())
                .transportType(AmqpTransportType.AMQP_WEB_SOCKETS)
                .retryOptions(Sdk.noRetries());
        assertEquals(expected("ws-plain-q", 2), roundTrip(client, "ws-plain-q", 2));
    }

    @Test
    void aServerCertificateFromAnUntrustedCaIsRefused() throws Exception {
        SSLContext trusting = SSLContext.getDefault();
        SSLContext.setDefault(jvmDefault);
        try {
            ServiceBusClientBuilder client = new ServiceBusClientBuilder()
                    .connectionString(Broker.cloudConnectionString(BROKER.broker().tlsPort()))
                    .retryOptions(Sdk.noRetries().setTryTimeout(Duration.ofSeconds(5)));
            try (ServiceBusSenderClient sender = client.sender().queueName("untrusted-q").buildClient()) {
                assertThrows(Throwable.class, () -> sender.sendMessage(new ServiceBusMessage("refused")));
            }
        } finally {
            SSLContext.setDefault(trusting);
        }
        try (ServiceBusReceiverClient peeker = Sdk.builder(BROKER.connectionString()).receiver()
                .queueName("untrusted-q").buildClient()) {
            assertNull(peeker.peekMessage(), "nothing reached the queue");
        }
    }
}
