// Time-driven rules through the unmodified azservicebus SDK: TTL and expiry (with and without
// dead-lettering), the entity's default TTL, duplicate detection, auto-delete on idle,
// scheduled messages on a topic; partitioned entities; and what a durable broker keeps across
// kill -9. Mirrors tests/python/test_sdk_time.py, test_sdk_partitions.py, test_durability.py
// and tests/js/time.test.js. The waits here are the behaviour under test: time passing.

package sdk_test

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"ferrobus/tests/go/harness"
)

var (
	queueDefaultTTL      = sharedQueue("go-default-ttl", map[string]any{"default_message_time_to_live": "30s"})
	queueExpireDead      = sharedQueue("go-expire-dead-letter", map[string]any{"dead_lettering_on_message_expiration": true})
	queueExpireDrop      = sharedQueue("go-expire-drop", nil)
	queueExpireLocked    = sharedQueue("go-expire-locked", nil)
	queueDuplicates      = sharedQueue("go-duplicates", map[string]any{"requires_duplicate_detection": true, "duplicate_detection_history_time_window": "3s"})
	queuePartitioned     = sharedQueue("go-partitioned", map[string]any{"enable_partitioning": true})
	queuePartitionedSess = sharedQueue("go-partitioned-sessions", map[string]any{"enable_partitioning": true, "requires_session": true})
	topicScheduled       = sharedTopic("go-topic-scheduled", []string{"one", "two"}, nil)
)

func TestTheQueuesDefaultTTLAppliesAndCapsALongerOne(t *testing.T) {
	// rules TTL-1, TTL-2 (default_message_time_to_live = 30s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueDefaultTTL),
		message("no-ttl", "a"),
		&azservicebus.Message{MessageID: ptr("long-ttl"), Body: []byte("b"), TimeToLive: ptr(time.Hour)},
		&azservicebus.Message{MessageID: ptr("short-ttl"), Body: []byte("c"), TimeToLive: ptr(10 * time.Second)},
	)
	receiver := newQueueReceiver(t, client, queueDefaultTTL, nil)
	want := map[string]time.Duration{"no-ttl": 30 * time.Second, "long-ttl": 30 * time.Second, "short-ttl": 10 * time.Second}
	for _, got := range receiveExactly(t, receiver, 3, 10*time.Second) {
		if deref(got.TimeToLive) != want[got.MessageID] {
			t.Fatalf("%s TimeToLive %v, want %v", got.MessageID, deref(got.TimeToLive), want[got.MessageID])
		}
		if got.ExpiresAt == nil || got.ExpiresAt.Sub(*got.EnqueuedTime) != want[got.MessageID] {
			t.Fatalf("%s ExpiresAt %v, enqueued %v", got.MessageID, got.ExpiresAt, got.EnqueuedTime)
		}
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
}

func TestAnExpiredMessageIsDeadLetteredWithoutAReceiver(t *testing.T) {
	// rules TTL-4, TTL-6: the broker expires it on a timer; reason TTLExpiredException
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueExpireDead),
		&azservicebus.Message{MessageID: ptr("short-lived"), Body: []byte("x"), TimeToLive: ptr(time.Second)})
	time.Sleep(1500 * time.Millisecond) // the behaviour under test: the TTL passes unobserved
	deadLetters := newQueueReceiver(t, client, queueExpireDead, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, deadLetters, 1, 5*time.Second)[0]
	if dead.MessageID != "short-lived" || deref(dead.DeadLetterReason) != "TTLExpiredException" {
		t.Fatalf("dead letter %s reason %q", dead.MessageID, deref(dead.DeadLetterReason))
	}
	must(t, deadLetters.CompleteMessage(ctx, dead, nil), "CompleteMessage")
	assertNothingToReceive(t, newQueueReceiver(t, client, queueExpireDead, nil))
}

func TestAnExpiredMessageWithoutDeadLetteringIsDropped(t *testing.T) {
	// rules TTL-4, TTL-6
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueExpireDrop),
		&azservicebus.Message{MessageID: ptr("dropped"), Body: []byte("x"), TimeToLive: ptr(time.Second)})
	time.Sleep(1500 * time.Millisecond) // the behaviour under test: the TTL passes
	assertNothingToPeek(t, ctx, newQueueReceiver(t, client, queueExpireDrop, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}))
	receiver := newQueueReceiver(t, client, queueExpireDrop, nil)
	assertNothingToReceive(t, receiver)
	assertNothingToPeek(t, ctx, receiver)
}

func TestALockedMessageWhoseTTLPassesCanStillBeCompleted(t *testing.T) {
	// rule TTL-5: expiry does not take a message away from the receiver holding its lock
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueExpireLocked),
		&azservicebus.Message{MessageID: ptr("held"), Body: []byte("x"), TimeToLive: ptr(time.Second)})
	receiver := newQueueReceiver(t, client, queueExpireLocked, nil)
	got := receiveExactly(t, receiver, 1, 5*time.Second)[0]
	time.Sleep(1500 * time.Millisecond) // the behaviour under test: the TTL passes while locked
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage after the TTL")
	assertNothingToPeek(t, ctx, receiver)
}

func TestADuplicateMessageIDIsDroppedWithinTheWindowAndAcceptedAfterIt(t *testing.T) {
	// rule DUP-1 (duplicate_detection_history_time_window = 3s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueDuplicates)
	sendAll(t, ctx, sender, message("dup-1", "first"), message("dup-1", "second"), message("dup-2", "other"))
	receiver := newQueueReceiver(t, client, queueDuplicates, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	equalSlices(t, bodies(receiveExactly(t, receiver, 2, 10*time.Second)), []string{"first", "other"}, "within the window")
	assertNothingToReceive(t, receiver)
	time.Sleep(3500 * time.Millisecond) // the behaviour under test: the window passes
	sendAll(t, ctx, sender, message("dup-1", "third"))
	equalSlices(t, bodies(receiveExactly(t, receiver, 1, 10*time.Second)), []string{"third"}, "after the window")
}

func TestAnIdleQueueIsDeletedAndABusyOneKept(t *testing.T) {
	// rules IDL-1, IDL-2 (auto_delete_on_idle 1 s and 2 s)
	t.Parallel()
	ctx := testContext(t)
	broker := harness.StartForTest(t, harness.QueueTOML("idle-soon", map[string]any{"auto_delete_on_idle": "1s"})+
		harness.QueueTOML("idle-busy", map[string]any{"auto_delete_on_idle": "2s"}), harness.Options{})
	client := newClient(t, broker.ConnectionString(), nil)
	must(t, newSender(t, client, "idle-soon").SendMessage(ctx, message("early", "early"), nil), "SendMessage right after start-up")
	busy := newSender(t, client, "idle-busy")
	sends := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); sends++ {
		must(t, busy.SendMessage(ctx, message("busy", "busy"), nil), "SendMessage to the busy queue")
		time.Sleep(500 * time.Millisecond) // the behaviour under test: time passes
	}
	receiver := newQueueReceiver(t, client, "idle-busy", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	receiveExactly(t, receiver, sends, 10*time.Second)
	// A fresh sender: the first one's link was detached with the entity.
	err := newSender(t, client, "idle-soon").SendMessage(ctx, message("late", "late"), nil)
	expectCondition(t, err, amqp.ErrCondNotFound, "SendMessage to the idle queue")
}

func TestScheduledMessagesOnATopicReachEverySubscriptionAtTheirTime(t *testing.T) {
	// schedule-message on a topic: each subscription gets its copy at the scheduled time, and a
	// cancelled one reaches none
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, topicScheduled)
	at := time.Now().Add(2 * time.Second)
	_, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("on-time", "scheduled")}, at, nil)
	must(t, err, "ScheduleMessages to a topic")
	cancelled, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("cancelled", "never")}, at, nil)
	must(t, err, "ScheduleMessages to a topic")
	must(t, sender.CancelScheduledMessages(ctx, cancelled, nil), "CancelScheduledMessages on a topic")
	for _, subscription := range []string{"one", "two"} {
		receiver := newSubscriptionReceiver(t, client, topicScheduled, subscription, nil)
		got := receiveExactly(t, receiver, 1, 15*time.Second)[0]
		if got.MessageID != "on-time" || time.Now().Before(at.Add(-250*time.Millisecond)) {
			t.Fatalf("%s got %s at %s (scheduled %s)", subscription, got.MessageID, time.Now(), at)
		}
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
		assertNothingToReceive(t, receiver)
	}
}

func TestPartitionKeysChoosePartitionsAndSessionsKeepTheirOrder(t *testing.T) {
	// PRT-1, PRT-2: a partition key keeps its messages on one partition (numbered within it,
	// the partition in the top 16 bits); a session keeps its order; a partition key that
	// differs from the session id is refused
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queuePartitioned)
	for index := 0; index < 3; index++ {
		for _, key := range []string{"alpha", "beta"} {
			must(t, sender.SendMessage(ctx, &azservicebus.Message{MessageID: ptr(key), Body: []byte(key), PartitionKey: ptr(key)}, nil), "SendMessage")
		}
	}
	receiver := newQueueReceiver(t, client, queuePartitioned, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	byKey := map[string][]int64{}
	for _, got := range receiveExactly(t, receiver, 6, 10*time.Second) {
		if deref(got.PartitionKey) != got.MessageID {
			t.Fatalf("%s came back with partition key %q", got.MessageID, deref(got.PartitionKey))
		}
		byKey[got.MessageID] = append(byKey[got.MessageID], deref(got.SequenceNumber))
	}
	for key, numbers := range byKey {
		if len(numbers) != 3 {
			t.Fatalf("%s: %v", key, numbers)
		}
		for index := 1; index < len(numbers); index++ {
			if numbers[index]>>48 != numbers[0]>>48 || numbers[index] != numbers[index-1]+1 {
				t.Fatalf("partition key %s: sequence numbers %x are not consecutive in one partition", key, numbers)
			}
		}
	}
	sessions := newSender(t, client, queuePartitionedSess)
	for index := 0; index < 4; index++ {
		must(t, sessions.SendMessage(ctx, &azservicebus.Message{MessageID: ptr(string(rune('a' + index))), SessionID: ptr("ordered")}, nil), "SendMessage")
	}
	err := sessions.SendMessage(ctx, &azservicebus.Message{SessionID: ptr("ordered"), PartitionKey: ptr("other")}, nil)
	if err == nil {
		t.Fatal("a partition key that differs from the session id was accepted")
	}
	session, err := client.AcceptSessionForQueue(ctx, queuePartitionedSess, "ordered", nil)
	must(t, err, "AcceptSessionForQueue on a partitioned queue")
	equalSlices(t, messageIDs(receiveExactly(t, session, 4, 10*time.Second)), []string{"a", "b", "c", "d"}, "session order")
}

func TestADurableBrokerKeepsWhatItAcknowledgedAcrossKill9(t *testing.T) {
	// durability: active, deferred, scheduled and dead-lettered messages, session state and
	// rules made through the admin client are back after kill -9; completed messages are not
	t.Parallel()
	ctx := testContext(t)
	dataDir := t.TempDir()
	config := harness.QueueTOML("durable-q", nil) + harness.QueueTOML("durable-sessions", map[string]any{"requires_session": true}) +
		harness.TopicTOML("durable-topic", []string{"filtered"}, nil)
	broker := harness.StartForTest(t, config, harness.Options{DataDir: dataDir})
	client := newClient(t, broker.ConnectionString(), nil)
	sender := newSender(t, client, "durable-q")
	sendAll(t, ctx, sender, message("completed", "1"), message("active", "2"), message("deferred", "3"), message("dead", "4"))
	_, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("scheduled", "5")}, time.Now().Add(time.Hour), nil)
	must(t, err, "ScheduleMessages")
	receiver := newQueueReceiver(t, client, "durable-q", nil)
	received := receiveExactly(t, receiver, 4, 10*time.Second)
	must(t, receiver.CompleteMessage(ctx, received[0], nil), "CompleteMessage")
	must(t, receiver.AbandonMessage(ctx, received[1], nil), "AbandonMessage")
	must(t, receiver.DeferMessage(ctx, received[2], nil), "DeferMessage")
	must(t, receiver.DeadLetterMessage(ctx, received[3], &azservicebus.DeadLetterOptions{Reason: ptr("kept")}), "DeadLetterMessage")
	session, err := client.AcceptSessionForQueue(ctx, "durable-sessions", "s", nil)
	must(t, err, "AcceptSessionForQueue")
	must(t, session.SetSessionState(ctx, []byte("checkpoint"), nil), "SetSessionState")
	adminClient := newAdminClient(t, broker, broker.ConnectionString())
	replaceDefaultRule(t, adminClient, "durable-topic", "filtered", admin.RuleProperties{Name: "kept-rule", Filter: &admin.SQLFilter{Expression: "n > 1"}})

	broker.Kill()
	restarted := harness.StartForTest(t, config, harness.Options{DataDir: dataDir})
	client = newClient(t, restarted.ConnectionString(), nil)
	receiver = newQueueReceiver(t, client, "durable-q", nil)
	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages after the restart")
	equalSlices(t, messageIDs(peeked), []string{"active", "deferred", "scheduled"}, "kept messages")
	if peeked[0].DeliveryCount != 2 || peeked[1].State != azservicebus.MessageStateDeferred || peeked[2].State != azservicebus.MessageStateScheduled {
		t.Fatalf("kept states: delivery count %d, %v, %v", peeked[0].DeliveryCount, peeked[1].State, peeked[2].State)
	}
	dead, err := newQueueReceiver(t, client, "durable-q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}).
		PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages of the dead letters")
	if len(dead) != 1 || dead[0].MessageID != "dead" || deref(dead[0].DeadLetterReason) != "kept" {
		t.Fatalf("dead letters after the restart: %v", describe(dead))
	}
	session, err = client.AcceptSessionForQueue(ctx, "durable-sessions", "s", nil)
	must(t, err, "AcceptSessionForQueue after the restart")
	state, err := session.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState after the restart")
	if string(state) != "checkpoint" {
		t.Fatalf("session state after the restart %q", state)
	}
	rules := listRules(t, newAdminClient(t, restarted, restarted.ConnectionString()), "durable-topic", "filtered")
	if filter, ok := rules["kept-rule"].Filter.(*admin.SQLFilter); len(rules) != 1 || !ok || filter.Expression != "n > 1" {
		t.Fatalf("rules after the restart: %v", rules)
	}
}
