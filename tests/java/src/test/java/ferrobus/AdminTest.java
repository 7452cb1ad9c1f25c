package ferrobus;

import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.core.exception.ClientAuthenticationException;
import com.azure.core.exception.HttpResponseException;
import com.azure.core.exception.ResourceExistsException;
import com.azure.core.exception.ResourceNotFoundException;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateQueueOptions;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.CreateSubscriptionOptions;
import com.azure.messaging.servicebus.administration.models.CreateTopicOptions;
import com.azure.messaging.servicebus.administration.models.NamespaceProperties;
import com.azure.messaging.servicebus.administration.models.QueueProperties;
import com.azure.messaging.servicebus.administration.models.QueueRuntimeProperties;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.administration.models.SubscriptionProperties;
import com.azure.messaging.servicebus.administration.models.SubscriptionRuntimeProperties;
import com.azure.messaging.servicebus.administration.models.TopicRuntimeProperties;
import com.azure.messaging.servicebus.administration.models.TrueRuleFilter;
import com.azure.messaging.servicebus.models.DeadLetterOptions;
import java.io.IOException;
import java.security.GeneralSecurityException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The administration API through ServiceBusAdministrationClient over HTTPS on the AMQP port:
 * the development CA trusted through a trust store built here from {@code <data_dir>/dev-ca.pem},
 * and the port put back by a pipeline policy (the Java client always calls
 * {@code https://<host>}, port 443). Queues, topics, subscriptions, rules (SQL with parameters,
 * correlation, actions), runtime properties, namespace properties. Both auth modes: with keys
 * the client's SAS token (Manage) is checked and a wrong key is refused with 401.
 */
class AdminTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(Broker.durable(""));

    private static ServiceBusAdministrationClient admin;


    @BeforeAll
    static void adminClient() throws IOException, GeneralSecurityException, InterruptedException {
        Broker broker = BROKER.broker();
        admin = Sdk.adminClient(broker.connectionString(), broker.port(), Sdk.developmentCa(broker));
    }

    private static ServiceBusClientBuilder client() {
        return builder(BROKER.connectionString());
    }

    @Test
    void queueLifecycleAndRuntimeCounts() {
        String name = Sdk.uniqueId("adminq");
        QueueProperties created = admin.createQueue(name, new CreateQueueOptions().setMaxDeliveryCount(4)
                .setLockDuration(Duration.ofSeconds(30)).setDefaultMessageTimeToLive(Duration.ofHours(1))
                .setDeadLetteringOnMessageExpiration(true));
        assertEquals(name, created.getName());
        assertEquals(4, created.getMaxDeliveryCount());
        assertEquals(Duration.ofSeconds(30), created.getLockDuration());
        assertEquals(Duration.ofHours(1), created.getDefaultMessageTimeToLive());
        assertTrue(created.isDeadLetteringOnMessageExpiration());
        assertTrue(admin.getQueueExists(name));
        List<String> names = new ArrayList<>();
        admin.listQueues().forEach(queue -> names.add(queue.getName()));
        assertTrue(names.contains(name), names.toString());
        assertThrows(ResourceExistsException.class, () -> admin.createQueue(name));

        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName(name).buildClient();
                ServiceBusReceiverClient receiver = client.receiver().queueName(name).prefetchCount(0)
                        .maxAutoLockRenewDuration(Duration.ZERO).buildClient()) {
            for (int index = 0; index < 5; index++) {
                sender.sendMessage(new ServiceBusMessage("m" + index));
            }
            sender.scheduleMessage(new ServiceBusMessage("later"), OffsetDateTime.now().plusHours(1));
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, 2);
            receiver.complete(received.get(0));
            receiver.deadLetter(received.get(1), new DeadLetterOptions().setDeadLetterReason("bad"));
        }

        QueueRuntimeProperties runtime = admin.getQueueRuntimeProperties(name);
        assertEquals(3, runtime.getActiveMessageCount());
        assertEquals(1, runtime.getDeadLetterMessageCount());
        assertEquals(1, runtime.getScheduledMessageCount());
        assertEquals(0, runtime.getTransferMessageCount());
        assertEquals(5, runtime.getTotalMessageCount());
        assertTrue(runtime.getSizeInBytes() > 0);
        assertFalse(runtime.getCreatedAt().isAfter(runtime.getUpdatedAt()));

        QueueProperties queue = admin.getQueue(name);
        queue.setMaxDeliveryCount(7);
        queue.setLockDuration(Duration.ofSeconds(45));
        admin.updateQueue(queue);
        QueueProperties updated = admin.getQueue(name);
        assertEquals(7, updated.getMaxDeliveryCount());
        assertEquals(Duration.ofSeconds(45), updated.getLockDuration());

        admin.deleteQueue(name);
        assertThrows(ResourceNotFoundException.class, () -> admin.getQueue(name));
        assertThrows(ResourceNotFoundException.class, () -> admin.deleteQueue(name));
        assertFalse(admin.getQueueExists(name));
    }

    @Test
    void anUpdateAppliesToTheRunningQueue() {
        String name = Sdk.uniqueId("adminlock");
        admin.createQueue(name, new CreateQueueOptions().setLockDuration(Duration.ofSeconds(30)));
        QueueProperties queue = admin.getQueue(name);
        queue.setLockDuration(Duration.ofSeconds(90));
        admin.updateQueue(queue);
        ServiceBusClientBuilder client = client();
        try (ServiceBusSenderClient sender = client.sender().queueName(name).buildClient();
                ServiceBusReceiverClient receiver = client.receiver().queueName(name).prefetchCount(0)
                        .maxAutoLockRenewDuration(Duration.ZERO).buildClient()) {
            sender.sendMessage(new ServiceBusMessage("locked longer"));
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            long seconds = Duration.between(OffsetDateTime.now(), message.getLockedUntil()).toSeconds();
            assertTrue(seconds > 60, "locked for the updated 90 s, " + seconds + " s left");
            receiver.complete(message);
        }
        admin.deleteQueue(name);
    }

    @Test
    void topicSubscriptionAndRuleLifecycleWithRuntimeProperties() {
        String topic = Sdk.uniqueId("admint");
        admin.createTopic(topic, new CreateTopicOptions().setDefaultMessageTimeToLive(Duration.ofHours(2)));
        admin.createSubscription(topic, "all");
        SubscriptionProperties red = admin.createSubscription(topic, "red", "red-rule",
                new CreateSubscriptionOptions().setMaxDeliveryCount(3),
                new CreateRuleOptions(new SqlRuleFilter("color = 'red'"))
                        .setAction(new SqlRuleAction("SET sys.Label = 'red-copy'")));
        assertEquals(3, red.getMaxDeliveryCount());
        admin.createSubscription(topic, "eu");
        CorrelationRuleFilter correlation = new CorrelationRuleFilter().setCorrelationId("order-7");
        correlation.getProperties().put("region", "eu");
        admin.createRule(topic, "eu-rule", "eu", new CreateRuleOptions(correlation));
        admin.deleteRule(topic, "eu", "$Default");

        List<String> subscriptions = new ArrayList<>();
        admin.listSubscriptions(topic).forEach(subscription -> subscriptions.add(subscription.getSubscriptionName()));
        assertEquals(new TreeSet<>(List.of("all", "eu", "red")), new TreeSet<>(subscriptions));

        List<RuleProperties> redRules = new ArrayList<>();
        admin.listRules(topic, "red").forEach(redRules::add);
        assertEquals(List.of("red-rule"), redRules.stream().map(RuleProperties::getName).toList());
        SqlRuleFilter redFilter = assertInstanceOf(SqlRuleFilter.class, redRules.get(0).getFilter());
        assertEquals("color = 'red'", redFilter.getSqlExpression());
        SqlRuleAction redAction = assertInstanceOf(SqlRuleAction.class, redRules.get(0).getAction());
        assertEquals("SET sys.Label = 'red-copy'", redAction.getSqlExpression());
        RuleProperties euRule = admin.getRule(topic, "eu", "eu-rule");
        CorrelationRuleFilter euFilter = assertInstanceOf(CorrelationRuleFilter.class, euRule.getFilter());
        assertEquals("order-7", euFilter.getCorrelationId());
        assertEquals(Map.of("region", "eu"), euFilter.getProperties());
        assertInstanceOf(TrueRuleFilter.class, admin.getRule(topic, "all", "$Default").getFilter());
        assertThrows(ResourceNotFoundException.class, () -> admin.getRule(topic, "eu", "$Default"));

        try (ServiceBusSenderClient sender = client().sender().topicName(topic).buildClient()) {
            ServiceBusMessage redEu = new ServiceBusMessage("red-eu").setCorrelationId("order-7");
            redEu.getApplicationProperties().put("color", "red");
            redEu.getApplicationProperties().put("region", "eu");
            ServiceBusMessage blue = new ServiceBusMessage("blue");
            blue.getApplicationProperties().put("color", "blue");
            sender.sendMessages(List.of(redEu, blue));
        }
        SubscriptionRuntimeProperties allRuntime = admin.getSubscriptionRuntimeProperties(topic, "all");
        assertEquals(2, allRuntime.getActiveMessageCount());
        assertEquals(1, admin.getSubscriptionRuntimeProperties(topic, "red").getActiveMessageCount());
        assertEquals(1, admin.getSubscriptionRuntimeProperties(topic, "eu").getActiveMessageCount());
        TopicRuntimeProperties topicRuntime = admin.getTopicRuntimeProperties(topic);
        assertEquals(3, topicRuntime.getSubscriptionCount());

        try (ServiceBusReceiverClient receiver = client().receiver().topicName(topic).subscriptionName("red")
                .buildClient()) {
            ServiceBusReceivedMessage copy = receiveExactly(receiver, 1).get(0);
            assertEquals("red-copy", copy.getSubject(), "the rule's action ran");
            receiver.complete(copy);
        }

        RuleProperties rule = admin.getRule(topic, "red", "red-rule");
        rule.setFilter(new SqlRuleFilter("color = 'green'"));
        admin.updateRule(topic, "red", rule);
        SqlRuleFilter updated = assertInstanceOf(SqlRuleFilter.class,
                admin.getRule(topic, "red", "red-rule").getFilter());
        assertEquals("color = 'green'", updated.getSqlExpression());

        admin.deleteSubscription(topic, "eu");
        assertFalse(admin.getSubscriptionExists(topic, "eu"));
        admin.deleteTopic(topic);
        assertFalse(admin.getTopicExists(topic));
    }

    /**
     * A SQL filter with parameters (the Java client writes every parameter value as an
     * {@code xsd:string}): the rule reads back with its parameters and selects by their values.
     * The data plane's rule manager cannot carry parameters (the Java SDK's
     * {@code MessageUtils.encodeRuleOptionToMap} writes only the expression), so this goes
     * through the administration client.
     */
    @Test
    void aSqlFilterWithParametersSelectsByTheParameterValues() {
        String topic = Sdk.uniqueId("adminparams");
        admin.createTopic(topic);
        SqlRuleFilter filter = new SqlRuleFilter("color = @color AND size = @size");
        filter.getParameters().put("@color", "red");
        filter.getParameters().put("@size", "large");
        admin.createSubscription(topic, "chosen", "by-parameters", new CreateSubscriptionOptions(),
                new CreateRuleOptions(filter));

        SqlRuleFilter read = assertInstanceOf(SqlRuleFilter.class,
                admin.getRule(topic, "chosen", "by-parameters").getFilter());
        assertEquals("color = @color AND size = @size", read.getSqlExpression());
        assertEquals(Map.of("@color", "red", "@size", "large"), read.getParameters());

        try (ServiceBusSenderClient sender = client().sender().topicName(topic).buildClient()) {
            List<ServiceBusMessage> messages = new ArrayList<>();
            for (String[] pair : new String[][] {{"red", "large"}, {"red", "small"}, {"blue", "large"}}) {
                ServiceBusMessage message = new ServiceBusMessage(pair[0] + "-" + pair[1]);
                message.getApplicationProperties().put("color", pair[0]);
                message.getApplicationProperties().put("size", pair[1]);
                messages.add(message);
            }
            sender.sendMessages(messages);
        }
        try (ServiceBusReceiverClient receiver = client().receiver().topicName(topic).subscriptionName("chosen")
                .prefetchCount(0).buildClient()) {
            ServiceBusReceivedMessage chosen = receiveExactly(receiver, 1).get(0);
            assertEquals("red-large", chosen.getBody().toString());
            receiver.complete(chosen);
            assertNothingToReceive(receiver);
        }
        admin.deleteTopic(topic);
    }

    @Test
    void namespacePropertiesNameTheHostTheClientCalled() {
        NamespaceProperties namespace = admin.getNamespaceProperties();
        assertTrue(namespace.getName() != null && !namespace.getName().isEmpty(), "a namespace name");
        assertTrue(namespace.getMessagingSku() != null, "a SKU");
    }

    @Test
    void aWrongKeyIsRefusedWith401OnlyWhenKeysAreConfigured() throws Exception {
        Broker broker = BROKER.broker();
        ServiceBusAdministrationClient wrong = Sdk.adminClient(
                broker.connectionString(Broker.SAS_KEY_NAME, "not-the-key"), broker.port(), Sdk.developmentCa(broker));
        if (Broker.KEYS_MODE) {
            HttpResponseException error = assertThrows(HttpResponseException.class, wrong::getNamespaceProperties);
            assertInstanceOf(ClientAuthenticationException.class, error);
            assertEquals(401, error.getResponse().getStatusCode());
        } else {
            assertTrue(wrong.getNamespaceProperties() != null, "without keys any token is accepted");
        }
    }
}
