// Topics and subscriptions through the unmodified azservicebus API, with SQL and correlation
// rules made through admin.Client (the Go SDK has no rule manager on AMQP): fan-out, filters,
// SQL actions, SQL parameters, dead-letter sub-queues of subscriptions. Mirrors
// tests/python/test_sdk_topics.py and tests/js/rules.test.js.

package sdk_test

import (
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"ferrobus/tests/go/harness"
)

var (
	topicFanOut          = sharedTopic("go-fan-out", []string{"audit", "billing"}, nil)
	topicDeadLetterQueue = sharedTopic("go-sub-dead-letter", []string{"audit", "billing"}, nil)
)

func newSubscriptionReceiver(t *testing.T, client *azservicebus.Client, topic, subscription string, options *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	receiver, err := client.NewReceiverForSubscription(topic, subscription, options)
	must(t, err, "NewReceiverForSubscription "+topic+"/"+subscription)
	return receiver
}

// drainIDs receives everything a subscription holds (receive-and-delete), in order.
func drainIDs(t *testing.T, client *azservicebus.Client, topic, subscription string, count int) []string {
	t.Helper()
	receiver := newSubscriptionReceiver(t, client, topic, subscription, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	received := receiveExactly(t, receiver, count, 10*time.Second)
	assertNothingToReceive(t, receiver)
	return messageIDs(received)
}

func TestAMessageSentToATopicReachesEverySubscription(t *testing.T) {
	// every subscription gets its own copy, with the topic's sequence number (rule SEQ-1)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, topicFanOut), &azservicebus.Message{
		MessageID: ptr("fan-out-1"), Body: []byte("created"), ApplicationProperties: map[string]any{"kind": "order"},
	})
	var numbers []int64
	for _, subscription := range []string{"audit", "billing"} {
		receiver := newSubscriptionReceiver(t, client, topicFanOut, subscription, nil)
		got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
		if got.MessageID != "fan-out-1" || string(got.Body) != "created" || got.ApplicationProperties["kind"] != "order" {
			t.Fatalf("%s got %v %#v", subscription, describe([]*azservicebus.ReceivedMessage{got}), got.ApplicationProperties)
		}
		numbers = append(numbers, deref(got.SequenceNumber))
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
		assertNothingToReceive(t, receiver)
	}
	if numbers[0] != numbers[1] || numbers[0] < 1 {
		t.Fatalf("each copy carries the topic's sequence number: %v", numbers)
	}
	receiver := newSubscriptionReceiver(t, client, topicFanOut, "no-such-subscription", nil)
	receiveContext := testContext(t)
	_, err := receiver.ReceiveMessages(receiveContext, 1, nil)
	expectCondition(t, err, "amqp:not-found", "ReceiveMessages from an unknown subscription")
}

// rulesBroker is a durable broker (for the admin client's CA) with one topic and the given
// subscriptions; returns it, a data-plane client and an admin client.
func rulesBroker(t *testing.T, topic string, subscriptions ...string) (*harness.Broker, *azservicebus.Client, *admin.Client) {
	t.Helper()
	broker := durableBroker(t, harness.TopicTOML(topic, subscriptions, nil))
	return broker, newClient(t, broker.ConnectionString(), nil), newAdminClient(t, broker, broker.ConnectionString())
}

func replaceDefaultRule(t *testing.T, adminClient *admin.Client, topic, subscription string, rule admin.RuleProperties) {
	t.Helper()
	ctx := testContext(t)
	_, err := adminClient.DeleteRule(ctx, topic, subscription, "$Default", nil)
	must(t, err, "DeleteRule $Default")
	_, err = adminClient.CreateRule(ctx, topic, subscription, &admin.CreateRuleOptions{Name: &rule.Name, Filter: rule.Filter, Action: rule.Action})
	must(t, err, "CreateRule "+rule.Name)
}

func TestAnSQLFilterLetsOnlyMatchingMessagesThrough(t *testing.T) {
	// README filters (SQL grammar); rules created at run time through the admin API
	t.Parallel()
	ctx := testContext(t)
	_, client, adminClient := rulesBroker(t, "orders", "filtered", "all")
	replaceDefaultRule(t, adminClient, "orders", "filtered", admin.RuleProperties{
		Name: "red-only", Filter: &admin.SQLFilter{Expression: "color = 'red' AND size > 2"},
	})
	sendAll(t, ctx, newSender(t, client, "orders"),
		&azservicebus.Message{MessageID: ptr("red-3"), ApplicationProperties: map[string]any{"color": "red", "size": int64(3)}},
		&azservicebus.Message{MessageID: ptr("red-1"), ApplicationProperties: map[string]any{"color": "red", "size": int64(1)}},
		&azservicebus.Message{MessageID: ptr("blue-5"), ApplicationProperties: map[string]any{"color": "blue", "size": int64(5)}},
		&azservicebus.Message{MessageID: ptr("none")},
		&azservicebus.Message{MessageID: ptr("red-9"), ApplicationProperties: map[string]any{"color": "red", "size": 9.5}},
	)
	equalSlices(t, drainIDs(t, client, "orders", "filtered", 2), []string{"red-3", "red-9"}, "filtered")
	equalSlices(t, drainIDs(t, client, "orders", "all", 5), []string{"red-3", "red-1", "blue-5", "none", "red-9"}, "all")
}

func TestACorrelationFilterMatchesSystemAndApplicationPropertiesExactly(t *testing.T) {
	// README filters: a correlation filter matches all its set fields exactly
	t.Parallel()
	ctx := testContext(t)
	_, client, adminClient := rulesBroker(t, "events", "filtered")
	replaceDefaultRule(t, adminClient, "events", "filtered", admin.RuleProperties{
		Name: "x-in-eu",
		Filter: &admin.CorrelationFilter{
			Subject: ptr("x"), CorrelationID: ptr("c-1"), ApplicationProperties: map[string]any{"region": "eu"},
		},
	})
	sendAll(t, ctx, newSender(t, client, "events"),
		&azservicebus.Message{MessageID: ptr("match"), Subject: ptr("x"), CorrelationID: ptr("c-1"), ApplicationProperties: map[string]any{"region": "eu"}},
		&azservicebus.Message{MessageID: ptr("other-region"), Subject: ptr("x"), CorrelationID: ptr("c-1"), ApplicationProperties: map[string]any{"region": "us"}},
		&azservicebus.Message{MessageID: ptr("other-subject"), Subject: ptr("y"), CorrelationID: ptr("c-1"), ApplicationProperties: map[string]any{"region": "eu"}},
		&azservicebus.Message{MessageID: ptr("no-correlation"), Subject: ptr("x"), ApplicationProperties: map[string]any{"region": "eu"}},
		&azservicebus.Message{MessageID: ptr("extra"), Subject: ptr("x"), CorrelationID: ptr("c-1"), ApplicationProperties: map[string]any{"region": "eu", "more": true}},
	)
	equalSlices(t, drainIDs(t, client, "events", "filtered", 2), []string{"match", "extra"}, "filtered")
}

func TestAnSQLActionIsAppliedToTheSubscriptionsCopy(t *testing.T) {
	// README actions: SET and REMOVE on user properties, SET on a system property
	t.Parallel()
	ctx := testContext(t)
	_, client, adminClient := rulesBroker(t, "work", "prioritised", "plain")
	replaceDefaultRule(t, adminClient, "work", "prioritised", admin.RuleProperties{
		Name:   "prioritise",
		Filter: &admin.SQLFilter{Expression: "kind = 'order'"},
		Action: &admin.SQLAction{Expression: "SET priority = 'high'; REMOVE scratch; SET sys.Label = 'urgent'"},
	})
	sendAll(t, ctx, newSender(t, client, "work"),
		&azservicebus.Message{MessageID: ptr("order-1"), Body: []byte("o"), ApplicationProperties: map[string]any{"kind": "order", "priority": "low", "scratch": 1, "keep": int64(7)}},
		&azservicebus.Message{MessageID: ptr("note-1"), Body: []byte("n"), ApplicationProperties: map[string]any{"kind": "note"}},
	)
	receiver := newSubscriptionReceiver(t, client, "work", "prioritised", nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if got.MessageID != "order-1" || string(got.Body) != "o" {
		t.Fatalf("got %v", describe([]*azservicebus.ReceivedMessage{got}))
	}
	properties := got.ApplicationProperties
	if properties["priority"] != "high" || properties["kind"] != "order" || properties["keep"] != int64(7) {
		t.Fatalf("action not applied: %#v", properties)
	}
	if _, present := properties["scratch"]; present {
		t.Fatalf("REMOVE scratch left it: %#v", properties)
	}
	if deref(got.Subject) != "urgent" {
		t.Fatalf("SET sys.Label: subject %q", deref(got.Subject))
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	// The other subscription's copy is untouched.
	plain := newSubscriptionReceiver(t, client, "work", "plain", nil)
	copies := receiveExactly(t, plain, 2, 10*time.Second)
	if copies[0].ApplicationProperties["priority"] != "low" || copies[0].Subject != nil {
		t.Fatalf("the action changed another subscription's copy: %#v subject %v", copies[0].ApplicationProperties, copies[0].Subject)
	}
}

func TestSQLFilterAndActionParametersAreUsed(t *testing.T) {
	// SqlFilter/SqlRuleAction Parameters (the admin API's KeyValueOfstringanyType list): @name
	// placeholders take the parameters' typed values, and the rule reads back with them
	t.Parallel()
	ctx := testContext(t)
	_, client, adminClient := rulesBroker(t, "priced", "expensive")
	replaceDefaultRule(t, adminClient, "priced", "expensive", admin.RuleProperties{
		Name: "over-limit",
		Filter: &admin.SQLFilter{
			Expression: "amount > @limit AND currency = @currency AND rush = @rush",
			Parameters: map[string]any{"@limit": int64(10), "@currency": "EUR", "@rush": true},
		},
		Action: &admin.SQLAction{
			Expression: "SET tier = @tier; SET factor = @factor",
			Parameters: map[string]any{"@tier": "gold", "@factor": 1.5},
		},
	})
	rule, err := adminClient.GetRule(ctx, "priced", "expensive", "over-limit", nil)
	must(t, err, "GetRule")
	if rule == nil {
		t.Fatal("GetRule: the rule is missing")
	}
	filter, ok := rule.Filter.(*admin.SQLFilter)
	if !ok || filter.Parameters["@limit"] != int64(10) || filter.Parameters["@currency"] != "EUR" || filter.Parameters["@rush"] != true {
		t.Fatalf("filter read back as %#v", rule.Filter)
	}
	action, ok := rule.Action.(*admin.SQLAction)
	if !ok || action.Parameters["@tier"] != "gold" || action.Parameters["@factor"] != 1.5 {
		t.Fatalf("action read back as %#v", rule.Action)
	}

	sendAll(t, ctx, newSender(t, client, "priced"),
		&azservicebus.Message{MessageID: ptr("big-eur"), ApplicationProperties: map[string]any{"amount": int64(50), "currency": "EUR", "rush": true}},
		&azservicebus.Message{MessageID: ptr("small-eur"), ApplicationProperties: map[string]any{"amount": int64(5), "currency": "EUR", "rush": true}},
		&azservicebus.Message{MessageID: ptr("big-usd"), ApplicationProperties: map[string]any{"amount": int64(50), "currency": "USD", "rush": true}},
		&azservicebus.Message{MessageID: ptr("big-slow"), ApplicationProperties: map[string]any{"amount": int64(50), "currency": "EUR", "rush": false}},
	)
	receiver := newSubscriptionReceiver(t, client, "priced", "expensive", nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if got.MessageID != "big-eur" {
		t.Fatalf("the parameterised filter let %s through", got.MessageID)
	}
	if got.ApplicationProperties["tier"] != "gold" || got.ApplicationProperties["factor"] != 1.5 {
		t.Fatalf("the parameterised action set %#v", got.ApplicationProperties)
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)
}

func TestRulesAreListedCreatedAndDeletedThroughTheAdminClient(t *testing.T) {
	// rule listing, a missing rule (nil), a duplicate name (409), True/False filters
	t.Parallel()
	ctx := testContext(t)
	_, client, adminClient := rulesBroker(t, "listed", "sub")
	_, err := adminClient.CreateRule(ctx, "listed", "sub", &admin.CreateRuleOptions{Name: ptr("sql-rule"), Filter: &admin.SQLFilter{Expression: "amount > 10"}})
	must(t, err, "CreateRule sql-rule")
	_, err = adminClient.CreateRule(ctx, "listed", "sub", &admin.CreateRuleOptions{
		Name: ptr("corr-rule"),
		Filter: &admin.CorrelationFilter{
			CorrelationID: ptr("corr-1"), Subject: ptr("label-1"), ContentType: ptr("application/json"),
			MessageID: ptr("m"), To: ptr("to"), ReplyTo: ptr("reply"), SessionID: ptr("s"), ReplyToSessionID: ptr("rs"),
			ApplicationProperties: map[string]any{"region": "eu", "tier": int64(2), "ratio": 0.5, "flag": true},
		},
	})
	must(t, err, "CreateRule corr-rule")
	_, err = adminClient.CreateRule(ctx, "listed", "sub", &admin.CreateRuleOptions{Name: ptr("never"), Filter: &admin.FalseFilter{}})
	must(t, err, "CreateRule never")
	_, err = adminClient.CreateRule(ctx, "listed", "sub", &admin.CreateRuleOptions{Name: ptr("sql-rule"), Filter: &admin.TrueFilter{}})
	expectHTTPStatus(t, err, 409, "CreateRule of an existing name")

	rules := listRules(t, adminClient, "listed", "sub")
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	equalSlices(t, names, []string{"$Default", "corr-rule", "never", "sql-rule"}, "rules")
	if _, ok := rules["$Default"].Filter.(*admin.TrueFilter); !ok {
		t.Fatalf("$Default is a TrueFilter, got %#v", rules["$Default"].Filter)
	}
	if _, ok := rules["never"].Filter.(*admin.FalseFilter); !ok {
		t.Fatalf("never is a FalseFilter, got %#v", rules["never"].Filter)
	}
	if sql, ok := rules["sql-rule"].Filter.(*admin.SQLFilter); !ok || sql.Expression != "amount > 10" {
		t.Fatalf("sql-rule %#v", rules["sql-rule"].Filter)
	}
	correlation, ok := rules["corr-rule"].Filter.(*admin.CorrelationFilter)
	if !ok {
		t.Fatalf("corr-rule %#v", rules["corr-rule"].Filter)
	}
	if deref(correlation.CorrelationID) != "corr-1" || deref(correlation.Subject) != "label-1" || deref(correlation.ContentType) != "application/json" ||
		deref(correlation.MessageID) != "m" || deref(correlation.To) != "to" || deref(correlation.ReplyTo) != "reply" ||
		deref(correlation.SessionID) != "s" || deref(correlation.ReplyToSessionID) != "rs" {
		t.Fatalf("correlation fields %#v", correlation)
	}
	wantProperties := map[string]any{"region": "eu", "tier": int64(2), "ratio": 0.5, "flag": true}
	for key, value := range wantProperties {
		if correlation.ApplicationProperties[key] != value {
			t.Fatalf("correlation properties %#v, want %#v", correlation.ApplicationProperties, wantProperties)
		}
	}

	missing, err := adminClient.GetRule(ctx, "listed", "sub", "no-such-rule", nil)
	if err != nil || missing != nil {
		t.Fatalf("GetRule of a missing rule: %v %v, want nil, nil", missing, err)
	}
	_, err = adminClient.DeleteRule(ctx, "listed", "sub", "no-such-rule", nil)
	expectHTTPStatus(t, err, 404, "DeleteRule of a missing rule")

	// UpdateRule replaces the filter; the subscription follows it.
	_, err = adminClient.UpdateRule(ctx, "listed", "sub", admin.RuleProperties{Name: "sql-rule", Filter: &admin.SQLFilter{Expression: "amount > 100"}})
	must(t, err, "UpdateRule")
	for _, name := range []string{"$Default", "corr-rule", "never"} {
		_, err = adminClient.DeleteRule(ctx, "listed", "sub", name, nil)
		must(t, err, "DeleteRule "+name)
	}
	sendAll(t, ctx, newSender(t, client, "listed"),
		&azservicebus.Message{MessageID: ptr("fifty"), ApplicationProperties: map[string]any{"amount": int64(50)}},
		&azservicebus.Message{MessageID: ptr("five-hundred"), ApplicationProperties: map[string]any{"amount": int64(500)}},
	)
	equalSlices(t, drainIDs(t, client, "listed", "sub", 1), []string{"five-hundred"}, "after UpdateRule")
}

func TestAnInvalidSQLFilterIsRefusedWithTheReason(t *testing.T) {
	// README rules at run time: invalid SQL is refused (400) with the position of the error
	t.Parallel()
	ctx := testContext(t)
	_, _, adminClient := rulesBroker(t, "strict", "sub")
	_, err := adminClient.CreateRule(ctx, "strict", "sub", &admin.CreateRuleOptions{Name: ptr("bad"), Filter: &admin.SQLFilter{Expression: "color = = 1"}})
	expectHTTPStatus(t, err, 400, "CreateRule with invalid SQL")
	rules := listRules(t, adminClient, "strict", "sub")
	if len(rules) != 1 {
		t.Fatalf("a refused rule is not added: %v", rules)
	}
}

func TestSubscriptionDeadLetterQueuesAreReceivable(t *testing.T) {
	// rules DLQ-1, DLQ-4 on a subscription (SubQueueDeadLetter)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, topicDeadLetterQueue), message("sub-dead-1", "bad"))
	receiver := newSubscriptionReceiver(t, client, topicDeadLetterQueue, "billing", nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	must(t, receiver.DeadLetterMessage(ctx, got, &azservicebus.DeadLetterOptions{Reason: ptr("Unbillable"), ErrorDescription: ptr("no customer")}), "DeadLetterMessage")
	deadLetters := newSubscriptionReceiver(t, client, topicDeadLetterQueue, "billing", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
	if dead.MessageID != "sub-dead-1" || deref(dead.DeadLetterReason) != "Unbillable" || deref(dead.DeadLetterErrorDescription) != "no customer" {
		t.Fatalf("dead letter %s reason %q description %q", dead.MessageID, deref(dead.DeadLetterReason), deref(dead.DeadLetterErrorDescription))
	}
	must(t, deadLetters.CompleteMessage(ctx, dead, nil), "CompleteMessage")
	assertNothingToReceive(t, deadLetters)
	// The audit subscription's copy is its own.
	audit := newSubscriptionReceiver(t, client, topicDeadLetterQueue, "audit", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	equalSlices(t, messageIDs(receiveExactly(t, audit, 1, 10*time.Second)), []string{"sub-dead-1"}, "audit copy")
}

func listRules(t *testing.T, adminClient *admin.Client, topic, subscription string) map[string]admin.RuleProperties {
	t.Helper()
	ctx := testContext(t)
	rules := map[string]admin.RuleProperties{}
	pager := adminClient.NewListRulesPager(topic, subscription, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, err, "NewListRulesPager NextPage")
		for _, rule := range page.Rules {
			rules[rule.Name] = rule
		}
	}
	return rules
}
