// The administration REST API (ATOM/XML) through the unmodified admin.Client of the Go SDK,
// on the data-plane connection string's host and port: the AMQP port answers HTTPS with the
// development certificate, trusted through the client's transport (RootCAs = <data_dir>/dev-ca.pem).
// The Go client speaks api-version 2024-05. Mirrors tests/python/test_sdk_admin.py and
// tests/js/admin.test.js; every test starts its own durable broker with an empty configuration.

package sdk_test

import (
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"ferrobus/tests/go/harness"
)

// expectHTTPStatus: err is the admin client's *azcore.ResponseError with status.
func expectHTTPStatus(t *testing.T, err error, status int, what string) *azcore.ResponseError {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected HTTP %d, but it succeeded", what, status)
	}
	var responseError *azcore.ResponseError
	if !errors.As(err, &responseError) {
		t.Fatalf("%s: expected an *azcore.ResponseError with HTTP %d, got %T: %v", what, status, err, err)
	}
	if responseError.StatusCode != status {
		t.Fatalf("%s: HTTP %d, want %d: %v", what, responseError.StatusCode, status, err)
	}
	return responseError
}

// adminBroker is a durable broker with no entities and an admin client for it.
func adminBroker(t *testing.T) (*harness.Broker, *admin.Client) {
	t.Helper()
	broker := durableBroker(t, "")
	return broker, newAdminClient(t, broker, broker.ConnectionString())
}

func queueNames(t *testing.T, adminClient *admin.Client, maxPageSize int32) [][]string {
	t.Helper()
	ctx := testContext(t)
	var pages [][]string
	pager := adminClient.NewListQueuesPager(&admin.ListQueuesOptions{MaxPageSize: maxPageSize})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, err, "NewListQueuesPager NextPage")
		var names []string
		for _, queue := range page.Queues {
			names = append(names, queue.QueueName)
		}
		pages = append(pages, names)
		if len(pages) > 10 {
			t.Fatal("paging does not terminate")
		}
	}
	return pages
}

func flatten(pages [][]string) []string {
	var all []string
	for _, page := range pages {
		all = append(all, page...)
	}
	sort.Strings(all)
	return all
}

func TestAdminQueuesCreateGetListUpdateDelete(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, adminClient := adminBroker(t)
	created, err := adminClient.CreateQueue(ctx, "orders", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{
		MaxDeliveryCount:                 ptr(int32(4)),
		LockDuration:                     ptr("PT30S"),
		DefaultMessageTimeToLive:         ptr("PT1H"),
		DeadLetteringOnMessageExpiration: ptr(true),
		RequiresSession:                  ptr(false),
		MaxSizeInMegabytes:               ptr(int32(2048)),
	}})
	must(t, err, "CreateQueue")
	if created.QueueName != "orders" || deref(created.MaxDeliveryCount) != 4 || deref(created.LockDuration) != "PT30S" ||
		deref(created.DefaultMessageTimeToLive) != "PT1H" || !deref(created.DeadLetteringOnMessageExpiration) ||
		deref(created.MaxSizeInMegabytes) != 2048 {
		t.Fatalf("created %+v", created)
	}
	if deref(created.Status) != admin.EntityStatusActive {
		t.Fatalf("status %v", deref(created.Status))
	}
	fetched, err := adminClient.GetQueue(ctx, "orders", nil)
	must(t, err, "GetQueue")
	if fetched == nil || deref(fetched.MaxDeliveryCount) != 4 || deref(fetched.LockDuration) != "PT30S" || deref(fetched.RequiresSession) {
		t.Fatalf("fetched %+v", fetched)
	}
	_, err = adminClient.CreateQueue(ctx, "orders", nil)
	expectHTTPStatus(t, err, http.StatusConflict, "CreateQueue of an existing queue")
	missing, err := adminClient.GetQueue(ctx, "no-such-queue", nil)
	if err != nil || missing != nil {
		t.Fatalf("GetQueue of a missing queue: %v %v, want nil, nil (the SDK maps 404 to nil)", missing, err)
	}

	_, err = adminClient.CreateQueue(ctx, "other", nil)
	must(t, err, "CreateQueue other")
	_, err = adminClient.CreateQueue(ctx, "third", nil)
	must(t, err, "CreateQueue third")
	pages := queueNames(t, adminClient, 2)
	if len(pages) != 2 || len(pages[0]) != 2 || len(pages[1]) != 1 {
		t.Fatalf("three queues in pages of 2: %v", pages)
	}
	equalSlices(t, flatten(pages), []string{"orders", "other", "third"}, "listed queues")

	properties := fetched.QueueProperties
	properties.MaxDeliveryCount = ptr(int32(7))
	properties.LockDuration = ptr("PT45S")
	updated, err := adminClient.UpdateQueue(ctx, "orders", properties, nil)
	must(t, err, "UpdateQueue")
	if deref(updated.MaxDeliveryCount) != 7 || deref(updated.LockDuration) != "PT45S" {
		t.Fatalf("updated %+v", updated)
	}
	reread, err := adminClient.GetQueue(ctx, "orders", nil)
	must(t, err, "GetQueue after update")
	if deref(reread.MaxDeliveryCount) != 7 || deref(reread.DefaultMessageTimeToLive) != "PT1H" || !deref(reread.DeadLetteringOnMessageExpiration) {
		t.Fatalf("an update keeps what it did not change: %+v", reread.QueueProperties)
	}
	_, err = adminClient.UpdateQueue(ctx, "no-such-queue", properties, nil)
	expectHTTPStatus(t, err, http.StatusNotFound, "UpdateQueue of a missing queue")

	_, err = adminClient.DeleteQueue(ctx, "orders", nil)
	must(t, err, "DeleteQueue")
	gone, err := adminClient.GetQueue(ctx, "orders", nil)
	if err != nil || gone != nil {
		t.Fatalf("GetQueue after delete: %v %v", gone, err)
	}
	_, err = adminClient.DeleteQueue(ctx, "orders", nil)
	expectHTTPStatus(t, err, http.StatusNotFound, "DeleteQueue twice")
	equalSlices(t, flatten(queueNames(t, adminClient, 0)), []string{"other", "third"}, "queues after delete")
}

func TestAdminQueueRuntimePropertiesFollowSendsSchedulesAndSettlements(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker, adminClient := adminBroker(t)
	_, err := adminClient.CreateQueue(ctx, "counted", nil)
	must(t, err, "CreateQueue")
	empty, err := adminClient.GetQueueRuntimeProperties(ctx, "counted", nil)
	must(t, err, "GetQueueRuntimeProperties")
	if empty.ActiveMessageCount != 0 || empty.TotalMessageCount != 0 {
		t.Fatalf("a new queue: %+v", empty.QueueRuntimeProperties)
	}
	client := newClient(t, broker.ConnectionString(), nil)
	sender := newSender(t, client, "counted")
	for index := 0; index < 5; index++ {
		must(t, sender.SendMessage(ctx, message("m"+string(rune('0'+index)), "x"), nil), "SendMessage")
	}
	_, err = sender.ScheduleMessages(ctx, []*azservicebus.Message{message("later", "later")}, time.Now().Add(time.Hour), nil)
	must(t, err, "ScheduleMessages")
	receiver := newQueueReceiver(t, client, "counted", nil)
	received := receiveExactly(t, receiver, 2, 10*time.Second)
	must(t, receiver.CompleteMessage(ctx, received[0], nil), "CompleteMessage")
	must(t, receiver.DeadLetterMessage(ctx, received[1], nil), "DeadLetterMessage")

	runtime, err := adminClient.GetQueueRuntimeProperties(ctx, "counted", nil)
	must(t, err, "GetQueueRuntimeProperties")
	got := runtime.QueueRuntimeProperties
	if got.ActiveMessageCount != 3 || got.DeadLetterMessageCount != 1 || got.ScheduledMessageCount != 1 ||
		got.TransferMessageCount != 0 || got.TransferDeadLetterMessageCount != 0 || got.TotalMessageCount != 5 {
		t.Fatalf("runtime properties %+v", got)
	}
	if got.SizeInBytes <= 0 || got.CreatedAt.IsZero() || got.UpdatedAt.Before(got.CreatedAt) || got.AccessedAt.IsZero() {
		t.Fatalf("size and times %+v", got)
	}
	pager := adminClient.NewListQueuesRuntimePropertiesPager(nil)
	found := false
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, err, "NewListQueuesRuntimePropertiesPager NextPage")
		for _, item := range page.QueueRuntimeProperties {
			if item.QueueName == "counted" {
				found = true
				if item.ActiveMessageCount != 3 || item.DeadLetterMessageCount != 1 || item.ScheduledMessageCount != 1 {
					t.Fatalf("listed runtime properties %+v", item)
				}
			}
		}
	}
	if !found {
		t.Fatal("the queue is not in the runtime properties listing")
	}
	missing, err := adminClient.GetQueueRuntimeProperties(ctx, "no-such-queue", nil)
	if err != nil || missing != nil {
		t.Fatalf("GetQueueRuntimeProperties of a missing queue: %v %v", missing, err)
	}
}

func TestAdminTopicsAndSubscriptionsWithRuntimeProperties(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker, adminClient := adminBroker(t)
	topic, err := adminClient.CreateTopic(ctx, "news", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{
		DefaultMessageTimeToLive: ptr("PT30M"), MaxSizeInMegabytes: ptr(int32(1024)),
	}})
	must(t, err, "CreateTopic")
	if topic.TopicName != "news" || deref(topic.DefaultMessageTimeToLive) != "PT30M" {
		t.Fatalf("created topic %+v", topic)
	}
	_, err = adminClient.CreateTopic(ctx, "news", nil)
	expectHTTPStatus(t, err, http.StatusConflict, "CreateTopic of an existing topic")

	red, err := adminClient.CreateSubscription(ctx, "news", "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		MaxDeliveryCount: ptr(int32(3)), LockDuration: ptr("PT20S"),
	}})
	must(t, err, "CreateSubscription red")
	if red.TopicName != "news" || red.SubscriptionName != "red" || deref(red.MaxDeliveryCount) != 3 || deref(red.LockDuration) != "PT20S" {
		t.Fatalf("created subscription %+v", red)
	}
	_, err = adminClient.CreateSubscription(ctx, "news", "blue", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Name: "only-blue", Filter: &admin.SQLFilter{Expression: "color = 'blue'"}},
	}})
	must(t, err, "CreateSubscription blue with a default rule")
	_, err = adminClient.CreateSubscription(ctx, "news", "sessions", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		RequiresSession: ptr(true),
	}})
	must(t, err, "CreateSubscription sessions")
	_, err = adminClient.CreateSubscription(ctx, "news", "red", nil)
	expectHTTPStatus(t, err, http.StatusConflict, "CreateSubscription of an existing subscription")
	_, err = adminClient.CreateSubscription(ctx, "no-such-topic", "s", nil)
	if err == nil {
		t.Fatal("CreateSubscription on a missing topic succeeded")
	}

	blueRules := listRules(t, adminClient, "news", "blue")
	if len(blueRules) != 1 {
		t.Fatalf("a subscription made with DefaultRule has that rule instead of $Default: %v", blueRules)
	}
	if filter, ok := blueRules["only-blue"].Filter.(*admin.SQLFilter); !ok || filter.Expression != "color = 'blue'" {
		t.Fatalf("only-blue %#v", blueRules["only-blue"].Filter)
	}

	var subscriptionNames []string
	pager := adminClient.NewListSubscriptionsPager("news", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, err, "NewListSubscriptionsPager NextPage")
		for _, item := range page.Subscriptions {
			subscriptionNames = append(subscriptionNames, item.SubscriptionName)
		}
	}
	sort.Strings(subscriptionNames)
	equalSlices(t, subscriptionNames, []string{"blue", "red", "sessions"}, "subscriptions")
	fetched, err := adminClient.GetSubscription(ctx, "news", "sessions", nil)
	must(t, err, "GetSubscription")
	if fetched == nil || !deref(fetched.RequiresSession) {
		t.Fatalf("fetched subscription %+v", fetched)
	}
	properties := fetched.SubscriptionProperties
	properties.MaxDeliveryCount = ptr(int32(9))
	_, err = adminClient.UpdateSubscription(ctx, "news", "sessions", properties, nil)
	must(t, err, "UpdateSubscription")
	reread, err := adminClient.GetSubscription(ctx, "news", "sessions", nil)
	must(t, err, "GetSubscription after update")
	if deref(reread.MaxDeliveryCount) != 9 || !deref(reread.RequiresSession) {
		t.Fatalf("updated subscription %+v", reread.SubscriptionProperties)
	}

	client := newClient(t, broker.ConnectionString(), nil)
	sender := newSender(t, client, "news")
	sendAll(t, ctx, sender,
		&azservicebus.Message{MessageID: ptr("r"), ApplicationProperties: map[string]any{"color": "red"}},
		&azservicebus.Message{MessageID: ptr("b"), ApplicationProperties: map[string]any{"color": "blue"}, SessionID: ptr("s1")},
	)
	_, err = sender.ScheduleMessages(ctx, []*azservicebus.Message{message("later", "later")}, time.Now().Add(time.Hour), nil)
	must(t, err, "ScheduleMessages to a topic")

	subscriptionRuntime, err := adminClient.GetSubscriptionRuntimeProperties(ctx, "news", "red", nil)
	must(t, err, "GetSubscriptionRuntimeProperties")
	if subscriptionRuntime.ActiveMessageCount != 2 || subscriptionRuntime.TotalMessageCount != 2 || subscriptionRuntime.CreatedAt.IsZero() {
		t.Fatalf("red runtime %+v", subscriptionRuntime.SubscriptionRuntimeProperties)
	}
	blueRuntime, err := adminClient.GetSubscriptionRuntimeProperties(ctx, "news", "blue", nil)
	must(t, err, "GetSubscriptionRuntimeProperties blue")
	if blueRuntime.ActiveMessageCount != 1 {
		t.Fatalf("blue runtime %+v", blueRuntime.SubscriptionRuntimeProperties)
	}
	topicRuntime, err := adminClient.GetTopicRuntimeProperties(ctx, "news", nil)
	must(t, err, "GetTopicRuntimeProperties")
	if topicRuntime.SubscriptionCount != 3 || topicRuntime.ScheduledMessageCount != 1 || topicRuntime.CreatedAt.IsZero() {
		t.Fatalf("topic runtime %+v", topicRuntime.TopicRuntimeProperties)
	}
	var topicNames []string
	topicPager := adminClient.NewListTopicsPager(nil)
	for topicPager.More() {
		page, err := topicPager.NextPage(ctx)
		must(t, err, "NewListTopicsPager NextPage")
		for _, item := range page.Topics {
			topicNames = append(topicNames, item.TopicName)
		}
	}
	equalSlices(t, topicNames, []string{"news"}, "topics")
	runtimePager := adminClient.NewListSubscriptionsRuntimePropertiesPager("news", nil)
	counts := map[string]int32{}
	for runtimePager.More() {
		page, err := runtimePager.NextPage(ctx)
		must(t, err, "NewListSubscriptionsRuntimePropertiesPager NextPage")
		for _, item := range page.SubscriptionRuntimeProperties {
			counts[item.SubscriptionName] = item.ActiveMessageCount
		}
	}
	if len(counts) != 3 || counts["red"] != 2 || counts["blue"] != 1 {
		t.Fatalf("listed subscription runtime counts %v", counts)
	}

	_, err = adminClient.DeleteSubscription(ctx, "news", "red", nil)
	must(t, err, "DeleteSubscription")
	missing, err := adminClient.GetSubscription(ctx, "news", "red", nil)
	if err != nil || missing != nil {
		t.Fatalf("GetSubscription after delete: %v %v", missing, err)
	}
	_, err = adminClient.DeleteTopic(ctx, "news", nil)
	must(t, err, "DeleteTopic")
	gone, err := adminClient.GetTopic(ctx, "news", nil)
	if err != nil || gone != nil {
		t.Fatalf("GetTopic after delete: %v %v", gone, err)
	}
	_, err = adminClient.DeleteTopic(ctx, "news", nil)
	expectHTTPStatus(t, err, http.StatusNotFound, "DeleteTopic twice")
}

func TestAdminTopicRuntimePropertiesCountFilters(t *testing.T) {
	// api-version 2024-05 (the Go client's): SqlFilterCount and CorrelationFilterCount of a topic,
	// over all its subscriptions, the $Default true filter counted as SQL
	t.Parallel()
	ctx := testContext(t)
	_, adminClient := adminBroker(t)
	_, err := adminClient.CreateTopic(ctx, "filtered", nil)
	must(t, err, "CreateTopic")
	for _, subscription := range []string{"one", "two"} {
		_, err = adminClient.CreateSubscription(ctx, "filtered", subscription, nil)
		must(t, err, "CreateSubscription")
	}
	_, err = adminClient.CreateRule(ctx, "filtered", "one", &admin.CreateRuleOptions{Name: ptr("sql"), Filter: &admin.SQLFilter{Expression: "a = 1"}})
	must(t, err, "CreateRule sql")
	_, err = adminClient.CreateRule(ctx, "filtered", "two", &admin.CreateRuleOptions{Name: ptr("corr"), Filter: &admin.CorrelationFilter{Subject: ptr("x")}})
	must(t, err, "CreateRule corr")
	runtime, err := adminClient.GetTopicRuntimeProperties(ctx, "filtered", nil)
	must(t, err, "GetTopicRuntimeProperties")
	if runtime.SubscriptionCount != 2 || runtime.SQLFilterCount != 3 || runtime.CorrelationFilterCount != 1 {
		t.Fatalf("subscriptions %d, SQL filters %d (want 3: two $Default and one), correlation filters %d (want 1)",
			runtime.SubscriptionCount, runtime.SQLFilterCount, runtime.CorrelationFilterCount)
	}
}

func TestAdminUserMetadataIsKeptAndSurvivesARestart(t *testing.T) {
	// UserMetadata of queues, topics and subscriptions: stored with the entity, shown by GET,
	// replaced by an update, kept in the data directory across a restart
	t.Parallel()
	ctx := testContext(t)
	dataDir := t.TempDir()
	broker := harness.StartForTest(t, "", harness.Options{DataDir: dataDir})
	adminClient := newAdminClient(t, broker, broker.ConnectionString())
	created, err := adminClient.CreateQueue(ctx, "described", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{UserMetadata: ptr("owned by go")}})
	must(t, err, "CreateQueue")
	if deref(created.UserMetadata) != "owned by go" {
		t.Fatalf("created queue UserMetadata %q", deref(created.UserMetadata))
	}
	_, err = adminClient.CreateTopic(ctx, "described-topic", &admin.CreateTopicOptions{Properties: &admin.TopicProperties{UserMetadata: ptr("topic note")}})
	must(t, err, "CreateTopic")
	_, err = adminClient.CreateSubscription(ctx, "described-topic", "sub", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{UserMetadata: ptr("subscription note")}})
	must(t, err, "CreateSubscription")
	queue, err := adminClient.GetQueue(ctx, "described", nil)
	must(t, err, "GetQueue")
	properties := queue.QueueProperties
	properties.UserMetadata = ptr("changed")
	_, err = adminClient.UpdateQueue(ctx, "described", properties, nil)
	must(t, err, "UpdateQueue")

	broker.Stop()
	restarted := harness.StartForTest(t, "", harness.Options{DataDir: dataDir})
	adminClient = newAdminClient(t, restarted, restarted.ConnectionString())
	queue, err = adminClient.GetQueue(ctx, "described", nil)
	must(t, err, "GetQueue after the restart")
	topic, err := adminClient.GetTopic(ctx, "described-topic", nil)
	must(t, err, "GetTopic after the restart")
	subscription, err := adminClient.GetSubscription(ctx, "described-topic", "sub", nil)
	must(t, err, "GetSubscription after the restart")
	if queue == nil || topic == nil || subscription == nil {
		t.Fatalf("entities missing after the restart: %v %v %v", queue, topic, subscription)
	}
	if deref(queue.UserMetadata) != "changed" || deref(topic.UserMetadata) != "topic note" || deref(subscription.UserMetadata) != "subscription note" {
		t.Fatalf("UserMetadata after the restart: queue %q topic %q subscription %q",
			deref(queue.UserMetadata), deref(topic.UserMetadata), deref(subscription.UserMetadata))
	}
}

func TestAdminNamespacePropertiesAreReported(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, adminClient := adminBroker(t)
	properties, err := adminClient.GetNamespaceProperties(ctx, nil)
	must(t, err, "GetNamespaceProperties")
	if properties.Name == "" || properties.SKU == "" || properties.CreatedTime.IsZero() {
		t.Fatalf("namespace properties %+v", properties)
	}
}

func TestAdminSenderOfADeletedQueueGetsNotFound(t *testing.T) {
	// a deleted entity's senders and receivers get amqp:not-found
	t.Parallel()
	ctx := testContext(t)
	broker, adminClient := adminBroker(t)
	_, err := adminClient.CreateQueue(ctx, "doomed", nil)
	must(t, err, "CreateQueue")
	client := newClient(t, broker.ConnectionString(), nil)
	sender := newSender(t, client, "doomed")
	must(t, sender.SendMessage(ctx, message("before", "before"), nil), "SendMessage before the delete")
	runtime, err := adminClient.GetQueueRuntimeProperties(ctx, "doomed", nil)
	must(t, err, "GetQueueRuntimeProperties")
	if runtime.ActiveMessageCount != 1 {
		t.Fatalf("active %d", runtime.ActiveMessageCount)
	}
	_, err = adminClient.DeleteQueue(ctx, "doomed", nil)
	must(t, err, "DeleteQueue")
	err = sender.SendMessage(ctx, message("after", "after"), nil)
	expectCondition(t, err, "amqp:not-found", "SendMessage after the delete")
}

func TestAdminAWrongKeyIsRefusedWith401(t *testing.T) {
	harness.SkipUnlessKeys(t)
	t.Parallel()
	ctx := testContext(t)
	broker, adminClient := adminBroker(t)
	wrong := newAdminClient(t, broker, broker.ConnectionStringWith(harness.SASKeyName, "not-the-key"))
	_, err := wrong.CreateQueue(ctx, "refused", nil)
	refused := expectHTTPStatus(t, err, http.StatusUnauthorized, "CreateQueue with a wrong key")
	if !strings.Contains(strings.ToLower(refused.Error()), "signature") {
		t.Fatalf("refused for another reason than the signature: %v", refused)
	}
	_, err = wrong.GetNamespaceProperties(ctx, nil)
	expectHTTPStatus(t, err, http.StatusUnauthorized, "GetNamespaceProperties with a wrong key")
	missing, err := adminClient.GetQueue(ctx, "refused", nil)
	if err != nil || missing != nil {
		t.Fatalf("the refused request created something: %v %v", missing, err)
	}
}
