// Authorization with [[auth.keys]] configured, through the unmodified azservicebus SDK: the
// SDK puts one token per link entity on $cbs (a dead-letter receiver's is for
// <entity>/$DeadLetterQueue); $management operations are checked per operation (Send to
// schedule, Listen to peek); a wrong key or a missing right is CodeUnauthorizedAccess. This
// file's broker configures its keys itself, so it runs the same in both FERROBUS_TEST_AUTH
// modes. Mirrors tests/js/auth.test.js and tests/python/test_sdk_auth.py.

package sdk_test

import (
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"ferrobus/tests/go/harness"
)

var authBroker struct {
	once   sync.Once
	broker *harness.Broker
	err    error
}

// keyedBroker is started once for this file: the suite's Manage key, a Listen key and a Send
// key; TestMain stops it.
func keyedBroker(t *testing.T) *harness.Broker {
	t.Helper()
	authBroker.once.Do(func() {
		config := harness.AuthKeyTOML(harness.SASKeyName, harness.SASKeyValue, "Manage") +
			harness.AuthKeyTOML("listener", "listen-secret", "Listen") +
			harness.AuthKeyTOML("sender", "send-secret", "Send") +
			harness.QueueTOML("auth-dead-letters", nil) +
			harness.QueueTOML("auth-guarded", nil) +
			harness.QueueTOML("auth-wrong-key", nil) +
			harness.TopicTOML("auth-topic", []string{"all"}, nil)
		authBroker.broker, authBroker.err = harness.Start(config, harness.Options{})
	})
	if authBroker.err != nil {
		t.Fatal(authBroker.err)
	}
	t.Cleanup(func() { authBroker.broker.ReportOnFailure(t) })
	return authBroker.broker
}

func stopAuthBroker(failed bool) {
	if broker := authBroker.broker; broker != nil {
		broker.Stop()
		if !failed {
			broker.Remove()
		}
	}
}

func TestAWrongKeyIsRefusedWithUnauthorizedAccess(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker := keyedBroker(t)
	client := newClient(t, broker.ConnectionStringWith(harness.SASKeyName, "not-the-key"), nil)
	err := newSender(t, client, "auth-wrong-key").SendMessage(ctx, message("refused", "x"), nil)
	expectCode(t, err, azservicebus.CodeUnauthorizedAccess, "SendMessage with a wrong key")
	receiver := newQueueReceiver(t, client, "auth-wrong-key", nil)
	_, err = receiver.PeekMessages(ctx, 1, nil)
	expectCode(t, err, azservicebus.CodeUnauthorizedAccess, "PeekMessages with a wrong key")
	// Nothing arrived.
	peeker := newQueueReceiver(t, newClient(t, broker.ConnectionString(), nil), "auth-wrong-key", nil)
	assertNothingToPeek(t, ctx, peeker)
}

func TestDeadLetterReceiversAreServedWithTheirDeadLetterToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker := keyedBroker(t)
	id := uniqueID("dead")
	client := newClient(t, broker.ConnectionString(), nil)
	sendAll(t, ctx, newSender(t, client, "auth-dead-letters"), message(id, "poison"))
	sendAll(t, ctx, newSender(t, client, "auth-topic"), message(id, "poison"))
	queueReceiver := newQueueReceiver(t, client, "auth-dead-letters", nil)
	subscriptionReceiver := newSubscriptionReceiver(t, client, "auth-topic", "all", nil)
	for _, receiver := range []*azservicebus.Receiver{queueReceiver, subscriptionReceiver} {
		got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
		must(t, receiver.DeadLetterMessage(ctx, got, &azservicebus.DeadLetterOptions{Reason: ptr("bad")}), "DeadLetterMessage")
	}
	// A fresh client (one connection): its only tokens are the dead-letter ones.
	fresh := newClient(t, broker.ConnectionString(), nil)
	for _, deadLetters := range []*azservicebus.Receiver{
		newQueueReceiver(t, fresh, "auth-dead-letters", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}),
		newSubscriptionReceiver(t, fresh, "auth-topic", "all", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}),
	} {
		dead := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
		if dead.MessageID != id || deref(dead.DeadLetterReason) != "bad" {
			t.Fatalf("dead letter %s reason %q", dead.MessageID, deref(dead.DeadLetterReason))
		}
		must(t, deadLetters.CompleteMessage(ctx, dead, nil), "CompleteMessage")
	}
}

func TestASendKeyMaySendAndScheduleButNotPeekOrReceive(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker := keyedBroker(t)
	client := newClient(t, broker.ConnectionStringWith("sender", "send-secret"), nil)
	sender := newSender(t, client, "auth-guarded")
	must(t, sender.SendMessage(ctx, message("by-sender", "x"), nil), "SendMessage with a Send key")
	numbers, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("later", "later")}, time.Now().Add(time.Hour), nil)
	must(t, err, "ScheduleMessages with a Send key")
	must(t, sender.CancelScheduledMessages(ctx, numbers, nil), "CancelScheduledMessages with a Send key")
	receiver := newQueueReceiver(t, client, "auth-guarded", nil)
	_, err = receiver.PeekMessages(ctx, 1, nil)
	expectCode(t, err, azservicebus.CodeUnauthorizedAccess, "PeekMessages with a Send key")
	_, err = receiver.ReceiveMessages(ctx, 1, nil)
	expectCode(t, err, azservicebus.CodeUnauthorizedAccess, "ReceiveMessages with a Send key")
}

func TestAListenKeyMayReceiveAndPeekButNotSendOrSchedule(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	broker := keyedBroker(t)
	manager := newClient(t, broker.ConnectionString(), nil)
	id := uniqueID("listen")
	sendAll(t, ctx, newSender(t, manager, "auth-guarded"), message(id, "for the listener"))
	client := newClient(t, broker.ConnectionStringWith("listener", "listen-secret"), nil)
	receiver := newQueueReceiver(t, client, "auth-guarded", nil)
	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages with a Listen key")
	if len(peeked) == 0 {
		t.Fatal("peeked nothing")
	}
	sender := newSender(t, client, "auth-guarded")
	expectCode(t, sender.SendMessage(ctx, message("never", "x"), nil), azservicebus.CodeUnauthorizedAccess, "SendMessage with a Listen key")
	_, err = sender.ScheduleMessages(ctx, []*azservicebus.Message{message("never", "x")}, time.Now().Add(time.Hour), nil)
	expectCode(t, err, azservicebus.CodeUnauthorizedAccess, "ScheduleMessages with a Listen key")
}
