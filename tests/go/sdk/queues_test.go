// Queues through the unmodified azservicebus API: senders, batches, peek-lock and
// receive-and-delete, settlement, deferral, dead-lettering, locks, scheduling and peeking.
// Mirrors tests/python/test_sdk_queues.py and tests/js/queues.test.js.

package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

var (
	queueRoundTrip        = sharedQueue("go-round-trip", nil)
	queueSequence         = sharedQueue("go-sequence", nil)
	queueBatchSize        = sharedQueue("go-batch-size", map[string]any{"max_message_size_in_kilobytes": 64})
	queueTooLarge         = sharedQueue("go-too-large", map[string]any{"max_message_size_in_kilobytes": 64})
	queueReceiveAndDelete = sharedQueue("go-receive-and-delete", nil)
	queueAbandon          = sharedQueue("go-abandon", nil)
	queueDefer            = sharedQueue("go-defer", nil)
	queueDeadLetter       = sharedQueue("go-dead-letter", nil)
	queueMaxDelivery      = sharedQueue("go-max-delivery", map[string]any{"max_delivery_count": 3})
	queueLockRenew        = sharedQueue("go-lock-renew", map[string]any{"lock_duration": "3s"})
	queueLockExpiry       = sharedQueue("go-lock-expiry", map[string]any{"lock_duration": "2s"})
	queueLockToken        = sharedQueue("go-lock-token", nil)
	queueSchedule         = sharedQueue("go-schedule", nil)
	queueScheduleSoon     = sharedQueue("go-schedule-soon", nil)
	queuePeek             = sharedQueue("go-peek", nil)
	queueAMQPMessage      = sharedQueue("go-amqp-message", nil)
	queueNoMessageID      = sharedQueue("go-no-message-id", nil)
	queueReleased         = sharedQueue("go-released", nil)
	queueDeadLetterSettle = sharedQueue("go-dead-letter-settle", nil)
)

func TestSingleMessageRoundTripKeepsTheSendersFieldsAndGetsBrokerAnnotations(t *testing.T) {
	// rules SEQ-1, SEQ-3, LCK-1
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sent := &azservicebus.Message{
		MessageID:             ptr("single-1"),
		Body:                  []byte(`{"greeting":"hello"}`),
		Subject:               ptr("greetings"),
		ContentType:           ptr("application/json"),
		CorrelationID:         ptr("correlation-1"),
		To:                    ptr("someone"),
		ReplyTo:               ptr("reply-queue"),
		TimeToLive:            ptr(10 * time.Minute),
		ApplicationProperties: map[string]any{"color": "blue", "count": int64(7), "ratio": 1.5, "flag": true},
	}
	sentAt := time.Now()
	must(t, newSender(t, client, queueRoundTrip).SendMessage(ctx, sent, nil), "SendMessage")

	receiver := newQueueReceiver(t, client, queueRoundTrip, nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if got.MessageID != "single-1" || !bytes.Equal(got.Body, sent.Body) {
		t.Fatalf("got %s %q", got.MessageID, got.Body)
	}
	if deref(got.Subject) != "greetings" || deref(got.ContentType) != "application/json" ||
		deref(got.CorrelationID) != "correlation-1" || deref(got.To) != "someone" || deref(got.ReplyTo) != "reply-queue" {
		t.Fatalf("properties not kept: subject %v content type %v correlation %v to %v reply-to %v",
			deref(got.Subject), deref(got.ContentType), deref(got.CorrelationID), deref(got.To), deref(got.ReplyTo))
	}
	if deref(got.TimeToLive) != 10*time.Minute {
		t.Fatalf("TimeToLive %v, want 10m (header.ttl kept on delivery)", deref(got.TimeToLive))
	}
	for key, want := range sent.ApplicationProperties {
		if got.ApplicationProperties[key] != want {
			t.Fatalf("application property %s = %#v, want %#v (all: %#v)", key, got.ApplicationProperties[key], want, got.ApplicationProperties)
		}
	}
	if deref(got.SequenceNumber) != 1 {
		t.Fatalf("the first message of an entity has sequence number 1, got %d", deref(got.SequenceNumber))
	}
	assertNear(t, got.EnqueuedTime, 10*time.Second, "EnqueuedTime")
	if got.EnqueuedTime.Before(sentAt.Add(-2 * time.Second)) {
		t.Fatalf("enqueued %s before it was sent %s", got.EnqueuedTime, sentAt)
	}
	if got.ExpiresAt == nil || got.ExpiresAt.Sub(*got.EnqueuedTime) != 10*time.Minute {
		t.Fatalf("ExpiresAt %v should be EnqueuedTime + TTL", got.ExpiresAt)
	}
	if got.DeliveryCount != 1 {
		t.Fatalf("the Go SDK reports the first delivery as DeliveryCount 1 (header + 1), got %d", got.DeliveryCount)
	}
	if got.State != azservicebus.MessageStateActive {
		t.Fatalf("State %v", got.State)
	}
	if got.LockToken == ([16]byte{}) {
		t.Fatal("a peek-lock delivery carries a lock token")
	}
	if got.LockedUntil == nil || !got.LockedUntil.After(time.Now()) {
		t.Fatalf("LockedUntil %v should be in the future", got.LockedUntil)
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)
	assertNothingToPeek(t, ctx, receiver)
}

func TestSequenceNumbersAreGaplessAcrossSingleSendsAndBatches(t *testing.T) {
	// rules SEQ-1, SEQ-2; contract §4.2 (a batch is split into its messages)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSequence)
	must(t, sender.SendMessage(ctx, message("seq-0", "0"), nil), "SendMessage")
	batch, err := sender.NewMessageBatch(ctx, nil)
	must(t, err, "NewMessageBatch")
	for _, id := range []string{"seq-1", "seq-2", "seq-3"} {
		must(t, batch.AddMessage(message(id, id[4:]), nil), "AddMessage")
	}
	if batch.NumMessages() != 3 {
		t.Fatalf("NumMessages %d", batch.NumMessages())
	}
	must(t, sender.SendMessageBatch(ctx, batch, nil), "SendMessageBatch")
	must(t, sender.SendMessage(ctx, message("seq-4", "4"), nil), "SendMessage")

	receiver := newQueueReceiver(t, client, queueSequence, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	received := receiveExactly(t, receiver, 5, 10*time.Second)
	equalSlices(t, sequenceNumbers(received), []int64{1, 2, 3, 4, 5}, "sequence numbers")
	equalSlices(t, messageIDs(received), []string{"seq-0", "seq-1", "seq-2", "seq-3", "seq-4"}, "send order")
	equalSlices(t, bodies(received), []string{"0", "1", "2", "3", "4"}, "bodies")
}

func TestAMessageBatchIsSizedByTheQueuesMaximumMessageSize(t *testing.T) {
	// contract §3.4: the attach's max-message-size sizes NewMessageBatch (queue limit 64 KB)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueBatchSize)
	batch, err := sender.NewMessageBatch(ctx, nil)
	must(t, err, "NewMessageBatch")
	err = batch.AddMessage(&azservicebus.Message{Body: make([]byte, 100*1024)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("a 100 KB message in a batch for a 64 KB queue: %v, want ErrMessageTooLarge", err)
	}
	must(t, batch.AddMessage(message("fits", "small"), nil), "AddMessage of a small message")
	must(t, sender.SendMessageBatch(ctx, batch, nil), "SendMessageBatch")
	receiver := newQueueReceiver(t, client, queueBatchSize, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	equalSlices(t, messageIDs(receiveExactly(t, receiver, 1, 10*time.Second)), []string{"fits"}, "received")
}

func TestAMessageLargerThanTheQueueLimitIsRefusedAndTheSenderSurvives(t *testing.T) {
	// contract §3.4 (attach max-message-size); queue limit 64 KB
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueTooLarge)
	// The SDK refuses it itself: the broker's attach names the queue's limit as the link's
	// max-message-size, as the service does.
	err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: ptr("too-big"), Body: bytes.Repeat([]byte("a"), 100*1024)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("SendMessage of 100 KB to a 64 KB queue: %v, want ErrMessageTooLarge", err)
	}
	must(t, sender.SendMessage(ctx, message("small", "fits"), nil), "SendMessage after the refusal")
	receiver := newQueueReceiver(t, client, queueTooLarge, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	equalSlices(t, messageIDs(receiveExactly(t, receiver, 1, 10*time.Second)), []string{"small"}, "received")
	assertNothingToReceive(t, receiver)
}

func TestReceiveAndDeleteRemovesTheMessageOnDeliveryAndHasNoLock(t *testing.T) {
	// rule LCK-5
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueReceiveAndDelete), message("rad-1", "once"))
	receiver := newQueueReceiver(t, client, queueReceiveAndDelete, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	// (The Go SDK shows any 16-byte delivery tag as LockToken, settled deliveries' too.)
	if got.MessageID != "rad-1" || string(got.Body) != "once" {
		t.Fatalf("got %v", describe([]*azservicebus.ReceivedMessage{got}))
	}
	expectNotSettleable(t, receiver.CompleteMessage(ctx, got, nil))
	peekLock := newQueueReceiver(t, client, queueReceiveAndDelete, nil)
	assertNothingToReceive(t, peekLock)
	assertNothingToPeek(t, ctx, peekLock)
}

func TestAbandonWithPropertiesToModifyRedeliversWithTheNewProperties(t *testing.T) {
	// rules LCK-1, LCK-2; contract §5.1 (modified{message-annotations})
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueAbandon), &azservicebus.Message{
		MessageID: ptr("abandon-1"), Body: []byte("retry me"),
		ApplicationProperties: map[string]any{"original": "kept", "note": "old"},
	})
	receiver := newQueueReceiver(t, client, queueAbandon, nil)
	first := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	must(t, receiver.AbandonMessage(ctx, first, &azservicebus.AbandonMessageOptions{
		PropertiesToModify: map[string]any{"note": "abandoned once", "attempt": int64(1)},
	}), "AbandonMessage")
	second := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if second.MessageID != "abandon-1" || deref(second.SequenceNumber) != deref(first.SequenceNumber) {
		t.Fatalf("redelivered %v, want the same message", describe([]*azservicebus.ReceivedMessage{second}))
	}
	if second.DeliveryCount != first.DeliveryCount+1 {
		t.Fatalf("abandon increments the delivery count: %d then %d", first.DeliveryCount, second.DeliveryCount)
	}
	want := map[string]any{"original": "kept", "note": "abandoned once", "attempt": int64(1)}
	if len(second.ApplicationProperties) != len(want) {
		t.Fatalf("properties %#v, want %#v", second.ApplicationProperties, want)
	}
	for key, value := range want {
		if second.ApplicationProperties[key] != value {
			t.Fatalf("properties %#v, want %#v", second.ApplicationProperties, want)
		}
	}
	must(t, receiver.CompleteMessage(ctx, second, nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)
}

func TestADeferredMessageIsOnlyReceivableBySequenceNumber(t *testing.T) {
	// rule LCK-4; contract §6.4 receive-by-sequence-number
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueDefer), message("defer-1", "later"), message("defer-2", "now"))
	receiver := newQueueReceiver(t, client, queueDefer, nil)
	received := receiveExactly(t, receiver, 2, 10*time.Second)
	deferred := received[0]
	must(t, receiver.DeferMessage(ctx, deferred, &azservicebus.DeferMessageOptions{
		PropertiesToModify: map[string]any{"deferredNote": "yes"},
	}), "DeferMessage")
	must(t, receiver.CompleteMessage(ctx, received[1], nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)

	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages")
	if len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("peek shows the deferred message with state deferred: %v", describe(peeked))
	}

	again, err := receiver.ReceiveDeferredMessages(ctx, []int64{*deferred.SequenceNumber}, nil)
	must(t, err, "ReceiveDeferredMessages")
	if len(again) != 1 || again[0].MessageID != "defer-1" || again[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("ReceiveDeferredMessages: %v", describe(again))
	}
	if again[0].ApplicationProperties["deferredNote"] != "yes" {
		t.Fatalf("defer's PropertiesToModify not applied: %#v", again[0].ApplicationProperties)
	}
	if again[0].LockedUntil == nil || !again[0].LockedUntil.After(time.Now()) {
		t.Fatalf("a deferred message received by sequence number is locked: %v", again[0].LockedUntil)
	}
	must(t, receiver.CompleteMessage(ctx, again[0], nil), "CompleteMessage of the deferred message")
	assertNothingToPeek(t, ctx, receiver)

	// A sequence number that is not deferred (here: gone) is not found.
	_, err = receiver.ReceiveDeferredMessages(ctx, []int64{*deferred.SequenceNumber}, nil)
	if err == nil {
		t.Fatal("ReceiveDeferredMessages of a completed message succeeded")
	}
}

func TestDeadLetterMessageMovesItToTheDeadLetterQueueWithReasonAndDescription(t *testing.T) {
	// rules DLQ-1, DLQ-2, DLQ-4; contract §5.1 (rejected{com.microsoft:dead-letter})
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueDeadLetter), &azservicebus.Message{
		MessageID: ptr("dead-1"), Body: []byte("order 42"), ApplicationProperties: map[string]any{"original": "kept"},
	})
	receiver := newQueueReceiver(t, client, queueDeadLetter, nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	must(t, receiver.DeadLetterMessage(ctx, got, &azservicebus.DeadLetterOptions{
		Reason:             ptr("InvalidOrder"),
		ErrorDescription:   ptr("order 42 has no lines"),
		PropertiesToModify: map[string]any{"customNote": "added on dead-letter"},
	}), "DeadLetterMessage")
	assertNothingToReceive(t, receiver)

	deadLetters := newQueueReceiver(t, client, queueDeadLetter, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
	if dead.MessageID != "dead-1" || string(dead.Body) != "order 42" || deref(dead.SequenceNumber) != deref(got.SequenceNumber) {
		t.Fatalf("dead letter %v", describe([]*azservicebus.ReceivedMessage{dead}))
	}
	if deref(dead.DeadLetterReason) != "InvalidOrder" || deref(dead.DeadLetterErrorDescription) != "order 42 has no lines" {
		t.Fatalf("reason %q description %q", deref(dead.DeadLetterReason), deref(dead.DeadLetterErrorDescription))
	}
	if dead.ApplicationProperties["original"] != "kept" || dead.ApplicationProperties["customNote"] != "added on dead-letter" {
		t.Fatalf("properties %#v", dead.ApplicationProperties)
	}
	must(t, deadLetters.CompleteMessage(ctx, dead, nil), "CompleteMessage on the dead-letter queue")
	assertNothingToReceive(t, deadLetters)
}

func TestDeadLetterQueueMessagesCanBeAbandonedAndDeferred(t *testing.T) {
	// rules DLQ-1, LCK-2, LCK-4 on a dead-letter sub-queue
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueDeadLetterSettle), message("dls-1", "a"), message("dls-2", "b"))
	receiver := newQueueReceiver(t, client, queueDeadLetterSettle, nil)
	for _, got := range receiveExactly(t, receiver, 2, 10*time.Second) {
		must(t, receiver.DeadLetterMessage(ctx, got, nil), "DeadLetterMessage without a reason")
	}
	deadLetters := newQueueReceiver(t, client, queueDeadLetterSettle, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, deadLetters, 2, 10*time.Second)
	must(t, deadLetters.AbandonMessage(ctx, dead[0], nil), "AbandonMessage on the dead-letter queue")
	must(t, deadLetters.DeferMessage(ctx, dead[1], nil), "DeferMessage on the dead-letter queue")
	again := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
	if again.MessageID != dead[0].MessageID {
		t.Fatalf("abandoned dead letter %s, redelivered %s", dead[0].MessageID, again.MessageID)
	}
	must(t, deadLetters.CompleteMessage(ctx, again, nil), "CompleteMessage")
	deferred, err := deadLetters.ReceiveDeferredMessages(ctx, []int64{*dead[1].SequenceNumber}, nil)
	must(t, err, "ReceiveDeferredMessages on the dead-letter queue")
	equalSlices(t, messageIDs(deferred), []string{dead[1].MessageID}, "deferred dead letter")
	must(t, deadLetters.CompleteMessage(ctx, deferred[0], nil), "CompleteMessage of the deferred dead letter")
	assertNothingToPeek(t, ctx, deadLetters)
}

func TestReachingMaxDeliveryCountDeadLettersWithMaxDeliveryCountExceeded(t *testing.T) {
	// rules LCK-2, DLQ-3 (max_delivery_count = 3)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueMaxDelivery), message("poison-1", "poison"))
	receiver := newQueueReceiver(t, client, queueMaxDelivery, nil)
	var counts []uint32
	for attempt := 0; attempt < 3; attempt++ {
		got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
		counts = append(counts, got.DeliveryCount)
		must(t, receiver.AbandonMessage(ctx, got, nil), "AbandonMessage")
	}
	equalSlices(t, counts, []uint32{1, 2, 3}, "delivery counts")
	assertNothingToReceive(t, receiver)
	deadLetters := newQueueReceiver(t, client, queueMaxDelivery, &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
	})
	dead := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
	if dead.MessageID != "poison-1" || deref(dead.DeadLetterReason) != "MaxDeliveryCountExceeded" {
		t.Fatalf("dead letter %s reason %q", dead.MessageID, deref(dead.DeadLetterReason))
	}
}

func TestRenewMessageLockMovesLockedUntilAndKeepsTheMessage(t *testing.T) {
	// rule LCK-1 (the lock can be renewed); contract §6.4 renew-lock (lock_duration = 3s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueLockRenew), message("renew-1", "slow"))
	receiver := newQueueReceiver(t, client, queueLockRenew, nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	initial := *got.LockedUntil
	if remaining := time.Until(initial); remaining <= 0 || remaining > 4*time.Second {
		t.Fatalf("LockedUntil reflects the 3 s lock_duration: %s remaining", remaining)
	}
	// Renew twice across the original expiry; the message must stay ours.
	for round := 0; round < 3; round++ {
		time.Sleep(1500 * time.Millisecond)
		before := *got.LockedUntil
		must(t, receiver.RenewMessageLock(ctx, got, nil), "RenewMessageLock")
		if !got.LockedUntil.After(before) {
			t.Fatalf("RenewMessageLock kept LockedUntil at %s (was %s)", got.LockedUntil, before)
		}
	}
	if !time.Now().After(initial) {
		t.Fatal("the test should outlive the first lock")
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage after the original lock expired")
	assertNothingToReceive(t, receiver)
}

func TestAnExpiredLockRedeliversAndSettlingTheStaleCopyFailsWithLockLost(t *testing.T) {
	// rules LCK-2 (lock expiry increments the delivery count), LCK-3 (lock_duration = 2s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueLockExpiry), message("lock-1", "slow consumer"))
	receiver := newQueueReceiver(t, client, queueLockExpiry, nil)
	stale := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	// Waits for the redelivery itself, which can only happen once the lock has expired.
	again := receiveExactly(t, receiver, 1, 15*time.Second)[0]
	if again.MessageID != "lock-1" || again.DeliveryCount != stale.DeliveryCount+1 {
		t.Fatalf("redelivered %s with delivery count %d (first %d)", again.MessageID, again.DeliveryCount, stale.DeliveryCount)
	}
	if time.Now().Before(stale.LockedUntil.Add(-250 * time.Millisecond)) {
		t.Fatal("redelivered before the lock expired")
	}
	if again.LockToken == stale.LockToken {
		t.Fatal("a new delivery carries a new lock token")
	}
	expectCode(t, receiver.CompleteMessage(ctx, stale, nil), azservicebus.CodeLockLost, "CompleteMessage of the stale copy")
	expectCode(t, receiver.RenewMessageLock(ctx, stale, nil), azservicebus.CodeLockLost, "RenewMessageLock of the stale copy")
	must(t, receiver.CompleteMessage(ctx, again, nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)
}

func TestSettlingWithOnlyTheLockTokenGoesThroughManagement(t *testing.T) {
	// contract §6.4 update-disposition and renew-lock by lock token (the SDK's
	// Example_settleWithLockToken)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueLockToken), message("token-1", "a"), message("token-2", "b"))
	receiver := newQueueReceiver(t, client, queueLockToken, nil)
	received := receiveExactly(t, receiver, 2, 10*time.Second)
	// Settled from a second receiver that never received them: only the lock token travels.
	other := newQueueReceiver(t, client, queueLockToken, nil)
	first := &azservicebus.ReceivedMessage{LockToken: received[0].LockToken}
	must(t, other.RenewMessageLock(ctx, first, nil), "RenewMessageLock by lock token")
	if first.LockedUntil == nil || !first.LockedUntil.After(time.Now()) {
		t.Fatalf("renewed LockedUntil %v", first.LockedUntil)
	}
	must(t, other.CompleteMessage(ctx, first, nil), "CompleteMessage by lock token")
	second := &azservicebus.ReceivedMessage{LockToken: received[1].LockToken}
	must(t, other.AbandonMessage(ctx, second, nil), "AbandonMessage by lock token")
	again := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if again.MessageID != "token-2" || again.DeliveryCount != 2 {
		t.Fatalf("abandoned by lock token: redelivered %s with delivery count %d", again.MessageID, again.DeliveryCount)
	}
	must(t, receiver.CompleteMessage(ctx, again, nil), "CompleteMessage")
	// A lock token the broker never gave out is lost.
	unknown := &azservicebus.ReceivedMessage{LockToken: [16]byte{1, 2, 3}}
	expectCode(t, other.CompleteMessage(ctx, unknown, nil), azservicebus.CodeLockLost, "CompleteMessage of an unknown lock token")
	assertNothingToPeek(t, ctx, receiver)
}

func TestScheduledMessagesArePeekableAndCancellable(t *testing.T) {
	// schedule-message / cancel-scheduled-message (contract §6.4); a scheduled message is not
	// delivered before its time
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSchedule)
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	numbers, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("sched-1", "one"), message("sched-2", "two")}, later, nil)
	must(t, err, "ScheduleMessages")
	if len(numbers) != 2 || numbers[0] == numbers[1] {
		t.Fatalf("ScheduleMessages returned %v", numbers)
	}
	// The other way to schedule: ScheduledEnqueueTime on a sent message.
	must(t, sender.SendMessage(ctx, &azservicebus.Message{MessageID: ptr("sched-3"), Body: []byte("three"), ScheduledEnqueueTime: &later}, nil), "SendMessage with ScheduledEnqueueTime")

	receiver := newQueueReceiver(t, client, queueSchedule, nil)
	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages")
	equalSlices(t, messageIDs(peeked), []string{"sched-1", "sched-2", "sched-3"}, "peeked scheduled messages")
	for _, scheduled := range peeked {
		if scheduled.State != azservicebus.MessageStateScheduled {
			t.Fatalf("%s has state %v, want scheduled", scheduled.MessageID, scheduled.State)
		}
		if scheduled.ScheduledEnqueueTime == nil || !scheduled.ScheduledEnqueueTime.Equal(later) {
			t.Fatalf("%s ScheduledEnqueueTime %v, want %s", scheduled.MessageID, scheduled.ScheduledEnqueueTime, later)
		}
	}
	assertNothingToReceive(t, receiver)

	must(t, sender.CancelScheduledMessages(ctx, []int64{numbers[0], *peeked[2].SequenceNumber}, nil), "CancelScheduledMessages")
	peeked, err = receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages after cancel")
	equalSlices(t, messageIDs(peeked), []string{"sched-2"}, "left after cancelling two")
	must(t, sender.CancelScheduledMessages(ctx, []int64{numbers[1]}, nil), "CancelScheduledMessages")
	assertNothingToPeek(t, ctx, receiver)
}

func TestAMessageScheduledSoonIsDeliveredAtItsTime(t *testing.T) {
	// a scheduled message becomes active at its time, with its scheduled time kept
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueScheduleSoon)
	at := time.Now().Add(2 * time.Second)
	_, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{message("soon-1", "soon")}, at, nil)
	must(t, err, "ScheduleMessages")
	receiver := newQueueReceiver(t, client, queueScheduleSoon, nil)
	got := receiveExactly(t, receiver, 1, 15*time.Second)[0]
	if time.Now().Before(at.Add(-250 * time.Millisecond)) {
		t.Fatalf("delivered %s before its scheduled time %s", time.Now(), at)
	}
	if got.MessageID != "soon-1" || got.ScheduledEnqueueTime == nil || got.ScheduledEnqueueTime.Sub(at).Abs() > time.Millisecond {
		t.Fatalf("got %s with ScheduledEnqueueTime %v, want %s", got.MessageID, got.ScheduledEnqueueTime, at)
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
}

func TestPeekReadsWithoutLockingAndContinuesWhereItStopped(t *testing.T) {
	// peek-message (contract §6.4): from-sequence-number, message-count; peeking takes no lock
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queuePeek)
	for index := 0; index < 5; index++ {
		must(t, sender.SendMessage(ctx, message("peek-"+string(rune('a'+index)), "p"), nil), "SendMessage")
	}
	receiver := newQueueReceiver(t, client, queuePeek, nil)
	first, err := receiver.PeekMessages(ctx, 2, nil)
	must(t, err, "PeekMessages")
	equalSlices(t, messageIDs(first), []string{"peek-a", "peek-b"}, "first page")
	rest, err := receiver.PeekMessages(ctx, 10, nil)
	must(t, err, "PeekMessages (continuing)")
	equalSlices(t, messageIDs(rest), []string{"peek-c", "peek-d", "peek-e"}, "the receiver continues after the last peeked")
	from, err := receiver.PeekMessages(ctx, 2, &azservicebus.PeekMessagesOptions{FromSequenceNumber: rest[0].SequenceNumber})
	must(t, err, "PeekMessages from a sequence number")
	equalSlices(t, messageIDs(from), []string{"peek-c", "peek-d"}, "from sequence number")
	for _, peeked := range first {
		if peeked.LockToken != ([16]byte{}) || peeked.LockedUntil != nil {
			t.Fatalf("a peeked message carries no lock: %x %v", peeked.LockToken, peeked.LockedUntil)
		}
	}
	// Nothing was locked: all five are received, first delivery each.
	received := receiveExactly(t, receiver, 5, 10*time.Second)
	for _, got := range received {
		if got.DeliveryCount != 1 {
			t.Fatalf("%s delivery count %d after peeks", got.MessageID, got.DeliveryCount)
		}
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
	empty, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages of an empty queue")
	if len(empty) != 0 {
		t.Fatalf("peeked %v from an empty queue", describe(empty))
	}
}

func TestAMQPAnnotatedMessagesKeepTheirBodyKindAndAnnotations(t *testing.T) {
	// contract §4.3: value and sequence bodies and message annotations travel as sent
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueAMQPMessage)
	must(t, sender.SendAMQPAnnotatedMessage(ctx, &azservicebus.AMQPAnnotatedMessage{
		Body:               azservicebus.AMQPAnnotatedMessageBody{Value: "hello value"},
		MessageAnnotations: map[any]any{"x-opt-custom": "annotation"},
		Properties:         &azservicebus.AMQPAnnotatedMessageProperties{MessageID: "value-1"},
	}, nil), "SendAMQPAnnotatedMessage (value)")
	must(t, sender.SendAMQPAnnotatedMessage(ctx, &azservicebus.AMQPAnnotatedMessage{
		Body:       azservicebus.AMQPAnnotatedMessageBody{Sequence: [][]any{{"a", int64(1)}, {true}}},
		Properties: &azservicebus.AMQPAnnotatedMessageProperties{MessageID: "sequence-1"},
	}, nil), "SendAMQPAnnotatedMessage (sequence)")
	must(t, sender.SendAMQPAnnotatedMessage(ctx, &azservicebus.AMQPAnnotatedMessage{
		Body:                  azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("part1"), []byte("part2")}},
		ApplicationProperties: map[string]any{"kind": "multi-data"},
		Properties:            &azservicebus.AMQPAnnotatedMessageProperties{MessageID: "data-1"},
	}, nil), "SendAMQPAnnotatedMessage (two data sections)")

	receiver := newQueueReceiver(t, client, queueAMQPMessage, nil)
	received := receiveExactly(t, receiver, 3, 10*time.Second)
	value := received[0].RawAMQPMessage
	if value.Body.Value != "hello value" || value.MessageAnnotations["x-opt-custom"] != "annotation" {
		t.Fatalf("value body %#v annotations %#v", value.Body.Value, value.MessageAnnotations)
	}
	sequence := received[1].RawAMQPMessage.Body.Sequence
	if len(sequence) != 2 || len(sequence[0]) != 2 || sequence[0][0] != "a" || sequence[0][1] != int64(1) || sequence[1][0] != true {
		t.Fatalf("sequence body %#v", sequence)
	}
	data := received[2].RawAMQPMessage.Body.Data
	if len(data) != 2 || string(data[0]) != "part1" || string(data[1]) != "part2" {
		t.Fatalf("data sections %q", data)
	}
	for _, got := range received {
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
}

func TestAMessageSentWithoutAMessageIDIsDeliveredWithOne(t *testing.T) {
	// contract §4.3: message-id is always present on delivery, the same every time
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueNoMessageID)
	must(t, sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("no id")}, nil), "SendMessage")
	receiver := newQueueReceiver(t, client, queueNoMessageID, nil)
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if got.MessageID == "" {
		t.Fatal("no message id on delivery")
	}
	must(t, receiver.AbandonMessage(ctx, got, nil), "AbandonMessage")
	again := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if again.MessageID != got.MessageID {
		t.Fatalf("message id %q on redelivery, %q first", again.MessageID, got.MessageID)
	}
	must(t, receiver.CompleteMessage(ctx, again, nil), "CompleteMessage")
}

func TestMessagesTheSDKReleasesComeBackWithoutCountingADelivery(t *testing.T) {
	// contract §3.6: between ReceiveMessages calls the Go SDK releases (AMQP `released`) what
	// arrives on its leftover credit; released is not a delivery attempt (rule LCK-2)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueReleased)
	sendAll(t, ctx, sender, message("released-0", "first"))
	receiver := newQueueReceiver(t, client, queueReleased, nil)
	// Five credits, one message: four credits stay on the link after the call returns.
	firstBatch, err := receiver.ReceiveMessages(ctx, 5, nil)
	must(t, err, "ReceiveMessages")
	equalSlices(t, messageIDs(firstBatch), []string{"released-0"}, "first batch")
	must(t, receiver.CompleteMessage(ctx, firstBatch[0], nil), "CompleteMessage")
	// These arrive on the leftover credit and are released by the SDK's releaser.
	sendAll(t, ctx, sender, message("released-1", "a"), message("released-2", "b"))
	// A second receiver (no leftover credit of its own) gets them once released, each as a
	// first delivery.
	other := newQueueReceiver(t, client, queueReleased, nil)
	received := receiveExactly(t, other, 2, 15*time.Second)
	for _, got := range received {
		if got.DeliveryCount != 1 {
			t.Fatalf("%s came back with delivery count %d; released must not count", got.MessageID, got.DeliveryCount)
		}
		must(t, other.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
}

// expectNotSettleable: a receive-and-delete message cannot be settled (the SDK says so itself).
func expectNotSettleable(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("settling a receive-and-delete message succeeded")
	}
}

func TestSendingToAnUnknownQueueFailsWithNotFound(t *testing.T) {
	// contract §3.4 (null terminus + detach amqp:not-found)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	err := newSender(t, client, "go-no-such-queue").SendMessage(ctx, message("lost", "lost"), nil)
	expectCondition(t, err, amqp.ErrCondNotFound, "SendMessage to an unknown queue")
	receiver := newQueueReceiver(t, client, "go-no-such-queue", nil)
	receiveCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = receiver.ReceiveMessages(receiveCtx, 1, nil)
	expectCondition(t, err, amqp.ErrCondNotFound, "ReceiveMessages from an unknown queue")
}
