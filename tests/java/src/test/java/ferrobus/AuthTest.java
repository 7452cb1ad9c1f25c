package ferrobus;

import static ferrobus.Sdk.assertServiceBusError;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.azure.core.amqp.exception.AmqpErrorCondition;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Shared access keys as the Java SDK presents them (a CBS token signed from the connection
 * string): with keys configured (FERROBUS_TEST_AUTH=keys) a wrong key is refused on send and
 * receive, and a key with only the Send right cannot receive; without keys any key is accepted,
 * as the emulator does.
 */
class AuthTest {
    private static final String SEND_ONLY_NAME = "send-only";
    private static final String SEND_ONLY_KEY = "send-only-key";

    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.queue("auth-q"),
            Broker.KEYS_MODE
                    ? Config.authKey(Broker.SAS_KEY_NAME, Broker.SAS_KEY_VALUE, "Manage")
                            + Config.authKey(SEND_ONLY_NAME, SEND_ONLY_KEY, "Send")
                    : ""));

    private static ServiceBusClientBuilder clientWith(String keyName, String key) {
        return Sdk.builder(BROKER.broker().connectionString(keyName, key));
    }

    @Test
    void aWrongKeyIsRefusedOnlyWhenKeysAreConfigured() {
        ServiceBusClientBuilder wrong = clientWith(Broker.SAS_KEY_NAME, "not-the-key");
        try (ServiceBusSenderClient sender = wrong.sender().queueName("auth-q").buildClient()) {
            if (Broker.KEYS_MODE) {
                assertServiceBusError(ServiceBusFailureReason.UNAUTHORIZED,
                        () -> sender.sendMessage(new ServiceBusMessage("refused")));
            } else {
                sender.sendMessage(new ServiceBusMessage("any key will do"));
            }
        }
        try (ServiceBusReceiverClient receiver = clientWith("SomeOtherName", "whatever").receiver()
                .queueName("auth-q").buildClient()) {
            if (Broker.KEYS_MODE) {
                assertServiceBusError(ServiceBusFailureReason.UNAUTHORIZED, receiver::peekMessage);
            } else {
                ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
                assertEquals("any key will do", message.getBody().toString());
                receiver.complete(message);
            }
        }
    }

    @Test
    void aSendOnlyKeySendsButCannotReceive() {
        ServiceBusClientBuilder sendOnly = clientWith(SEND_ONLY_NAME, SEND_ONLY_KEY);
        try (ServiceBusSenderClient sender = sendOnly.sender().queueName("auth-q").buildClient()) {
            sender.sendMessage(new ServiceBusMessage("sent with Send"));
        }
        try (ServiceBusReceiverClient receiver = sendOnly.receiver().queueName("auth-q").buildClient()) {
            if (Broker.KEYS_MODE) {
                Sdk.assertRefused(ServiceBusFailureReason.UNAUTHORIZED, AmqpErrorCondition.UNAUTHORIZED_ACCESS,
                        () -> receiver.receiveMessages(1, java.time.Duration.ofSeconds(5)).forEach(message -> { }));
            }
        }
        try (ServiceBusReceiverClient receiver = Sdk.builder(BROKER.connectionString()).receiver()
                .queueName("auth-q").buildClient()) {
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            assertEquals("sent with Send", message.getBody().toString());
            receiver.complete(message);
        }
    }
}
