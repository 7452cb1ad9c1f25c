package ferrobus;

import static ferrobus.Sdk.assertNothingToReceive;
import static ferrobus.Sdk.assertServiceBusError;
import static ferrobus.Sdk.builder;
import static ferrobus.Sdk.receiveExactly;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusRuleManagerClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.administration.models.CorrelationRuleFilter;
import com.azure.messaging.servicebus.administration.models.CreateRuleOptions;
import com.azure.messaging.servicebus.administration.models.RuleProperties;
import com.azure.messaging.servicebus.administration.models.SqlRuleAction;
import com.azure.messaging.servicebus.administration.models.SqlRuleFilter;
import com.azure.messaging.servicebus.administration.models.TrueRuleFilter;
import com.azure.messaging.servicebus.models.SubQueue;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Topics and subscriptions: SQL and correlation rules managed through ServiceBusRuleManagerClient
 * (the data plane's $management rule operations), rule actions, the subscriptions' dead-letter
 * sub-queues, filter evaluation errors, and what a sender to a subscription sees.
 */
class TopicTest {
    @RegisterExtension
    static final BrokerExtension BROKER = new BrokerExtension(String.join("",
            Config.topic("rules", new String[] {"red-big", "eu-orders", "everything"}),
            Config.topic("actions", new String[] {"labelled"}),
            Config.topic("dead-letters", new String[] {"sub"}),
            Config.topic("filter-error", new String[] {"strict"},
                    "dead_lettering_on_filter_evaluation_exceptions", true),
            Config.topic("fan-out", new String[] {"one", "two", "three"})));

    private static ServiceBusClientBuilder client() {
        return builder(BROKER.connectionString());
    }

    private static ServiceBusRuleManagerClient rules(String topic, String subscription) {
        return client().ruleManager().topicName(topic).subscriptionName(subscription).buildClient();
    }

    private static ServiceBusReceiverClient subscriptionReceiver(String topic, String subscription) {
        return client().receiver().topicName(topic).subscriptionName(subscription).prefetchCount(0).buildClient();
    }

    private static List<String> receiveIds(String topic, String subscription, int count) {
        try (ServiceBusReceiverClient receiver = subscriptionReceiver(topic, subscription)) {
            List<ServiceBusReceivedMessage> received = receiveExactly(receiver, count);
            received.forEach(receiver::complete);
            assertNothingToReceive(receiver);
            List<String> ids = new ArrayList<>();
            received.forEach(message -> ids.add(message.getMessageId()));
            return ids;
        }
    }

    private static ServiceBusMessage order(String id, String color, int amount, String region, String subject) {
        ServiceBusMessage message = new ServiceBusMessage("order " + id).setMessageId(id);
        message.getApplicationProperties().put("color", color);
        message.getApplicationProperties().put("amount", amount);
        message.getApplicationProperties().put("region", region);
        if (subject != null) {
            message.setSubject(subject);
        }
        return message;
    }

    @Test
    void eachSubscriptionReceivesExactlyTheCopiesItsRuleManagerRulesSelect() {
        try (ServiceBusRuleManagerClient redBig = rules("rules", "red-big");
                ServiceBusRuleManagerClient eu = rules("rules", "eu-orders")) {
            redBig.createRule("red-and-big", new CreateRuleOptions(new SqlRuleFilter("color = 'red' AND amount > 10")));
            redBig.deleteRule("$Default");
            CorrelationRuleFilter correlation = new CorrelationRuleFilter().setLabel("order");
            correlation.getProperties().put("region", "eu");
            eu.createRule("eu", new CreateRuleOptions(correlation));
            eu.deleteRule("$Default");

            List<RuleProperties> listed = new ArrayList<>();
            redBig.listRules().forEach(listed::add);
            assertEquals(1, listed.size(), "only the new rule is left: " + listed);
            assertEquals("red-and-big", listed.get(0).getName());
            SqlRuleFilter sql = assertInstanceOf(SqlRuleFilter.class, listed.get(0).getFilter());
            assertEquals("color = 'red' AND amount > 10", sql.getSqlExpression());

            List<RuleProperties> euRules = new ArrayList<>();
            eu.listRules().forEach(euRules::add);
            assertEquals(List.of("eu"), euRules.stream().map(RuleProperties::getName).toList());
            CorrelationRuleFilter listedCorrelation = assertInstanceOf(CorrelationRuleFilter.class,
                    euRules.get(0).getFilter());
            assertEquals("order", listedCorrelation.getLabel());
            assertEquals(Map.of("region", "eu"), listedCorrelation.getProperties());

            assertServiceBusError(ServiceBusFailureReason.MESSAGING_ENTITY_ALREADY_EXISTS,
                    () -> redBig.createRule("red-and-big", new CreateRuleOptions(new SqlRuleFilter("1=1"))));
        }

        try (ServiceBusSenderClient sender = client().sender().topicName("rules").buildClient()) {
            sender.sendMessages(List.of(
                    order("red-20-eu", "red", 20, "eu", "order"),
                    order("red-5-us", "red", 5, "us", "order"),
                    order("blue-50-eu", "blue", 50, "eu", "order"),
                    order("red-30-us-nosubject", "red", 30, "us", null),
                    order("green-1-eu-other", "green", 1, "eu", "invoice")));
        }
        assertEquals(new TreeSet<>(List.of("red-20-eu", "red-30-us-nosubject")),
                new TreeSet<>(receiveIds("rules", "red-big", 2)));
        assertEquals(new TreeSet<>(List.of("red-20-eu", "blue-50-eu")),
                new TreeSet<>(receiveIds("rules", "eu-orders", 2)));
        assertEquals(5, receiveIds("rules", "everything", 5).size());
    }

    @Test
    void aRuleActionSetsTheLabelAndPropertiesOfTheCopy() {
        try (ServiceBusRuleManagerClient manager = rules("actions", "labelled")) {
            manager.createRule("big", new CreateRuleOptions(new SqlRuleFilter("amount > 10"))
                    .setAction(new SqlRuleAction("SET sys.Label = 'big'; SET tagged = 'by-java'")));
            manager.deleteRule("$Default");
            List<RuleProperties> listed = new ArrayList<>();
            manager.listRules().forEach(listed::add);
            SqlRuleAction action = assertInstanceOf(SqlRuleAction.class, listed.get(0).getAction());
            assertTrue(action.getSqlExpression().contains("SET sys.Label = 'big'"), action.getSqlExpression());
        }
        try (ServiceBusSenderClient sender = client().sender().topicName("actions").buildClient()) {
            sender.sendMessages(List.of(order("small", "red", 1, "eu", "order"), order("large", "red", 99, "eu", "order")));
        }
        try (ServiceBusReceiverClient receiver = subscriptionReceiver("actions", "labelled")) {
            ServiceBusReceivedMessage copy = receiveExactly(receiver, 1).get(0);
            assertEquals("large", copy.getMessageId());
            assertEquals("big", copy.getSubject());
            assertEquals("by-java", copy.getApplicationProperties().get("tagged"));
            receiver.complete(copy);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void aRuleManagerCanPutTheDefaultRuleBack() {
        try (ServiceBusRuleManagerClient manager = rules("fan-out", "three")) {
            manager.deleteRule("$Default");
            List<RuleProperties> none = new ArrayList<>();
            manager.listRules().forEach(none::add);
            assertEquals(List.of(), none);
            manager.createRule("$Default", new CreateRuleOptions(new TrueRuleFilter()));
            List<RuleProperties> back = new ArrayList<>();
            manager.listRules().forEach(back::add);
            assertEquals(1, back.size());
            // The Java SDK sends a TrueRuleFilter as the SQL filter "1=1" (TrueRuleFilter is a
            // SqlRuleFilter) and reads it back as what the broker describes.
            SqlRuleFilter filter = assertInstanceOf(SqlRuleFilter.class, back.get(0).getFilter());
            assertEquals("1=1", filter.getSqlExpression());
        }
        try (ServiceBusSenderClient sender = client().sender().topicName("fan-out").buildClient()) {
            sender.sendMessage(new ServiceBusMessage("to all").setMessageId("fan"));
        }
        Map<String, List<String>> got = new TreeMap<>();
        for (String subscription : List.of("one", "two", "three")) {
            got.put(subscription, receiveIds("fan-out", subscription, 1));
        }
        assertEquals(Map.of("one", List.of("fan"), "two", List.of("fan"), "three", List.of("fan")), got);
    }

    @Test
    void aSubscriptionsDeadLetterQueueIsReadThroughItsSubQueue() {
        try (ServiceBusSenderClient sender = client().sender().topicName("dead-letters").buildClient()) {
            sender.sendMessage(new ServiceBusMessage("bad").setMessageId("dl-1"));
        }
        try (ServiceBusReceiverClient receiver = subscriptionReceiver("dead-letters", "sub");
                ServiceBusReceiverClient deadLetters = client().receiver().topicName("dead-letters")
                        .subscriptionName("sub").subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            assertEquals("dead-letters/subscriptions/sub/$deadletterqueue", deadLetters.getEntityPath());
            ServiceBusReceivedMessage message = receiveExactly(receiver, 1).get(0);
            receiver.deadLetter(message, new com.azure.messaging.servicebus.models.DeadLetterOptions()
                    .setDeadLetterReason("subscription-reason").setDeadLetterErrorDescription("described"));
            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("dl-1", dead.getMessageId());
            assertEquals("subscription-reason", dead.getDeadLetterReason());
            assertEquals("described", dead.getDeadLetterErrorDescription());
            deadLetters.complete(dead);
            assertNothingToReceive(deadLetters);
        }
    }

    @Test
    void aFilterEvaluationErrorDeadLettersOnASubscriptionWithTheFlag() {
        try (ServiceBusRuleManagerClient manager = rules("filter-error", "strict")) {
            manager.createRule("amount", new CreateRuleOptions(new SqlRuleFilter("amount > 5")));
            manager.deleteRule("$Default");
        }
        try (ServiceBusSenderClient sender = client().sender().topicName("filter-error").buildClient()) {
            ServiceBusMessage message = new ServiceBusMessage("bad").setMessageId("not-a-number");
            message.getApplicationProperties().put("amount", "abc");
            sender.sendMessage(message);
        }
        try (ServiceBusReceiverClient receiver = subscriptionReceiver("filter-error", "strict");
                ServiceBusReceiverClient deadLetters = client().receiver().topicName("filter-error")
                        .subscriptionName("strict").subQueue(SubQueue.DEAD_LETTER_QUEUE).buildClient()) {
            ServiceBusReceivedMessage dead = receiveExactly(deadLetters, 1).get(0);
            assertEquals("not-a-number", dead.getMessageId());
            assertEquals("FilterEvaluationException", dead.getDeadLetterReason());
            deadLetters.complete(dead);
            assertNothingToReceive(receiver);
        }
    }

    @Test
    void aSenderToASubscriptionIsRefused() {
        // The Java builder has no subscription sender; the entity path names one directly.
        try (ServiceBusSenderClient sender = client().sender().queueName("fan-out/subscriptions/one").buildClient()) {
            Throwable error = assertThrows(Throwable.class, () -> sender.sendMessage(new ServiceBusMessage("no")));
            assertTrue(String.valueOf(error.getMessage()).contains("Cannot send to subscription"),
                    "refused by the broker, naming why: " + error);
        }
    }
}
