// Session queues and subscriptions through the unmodified azservicebus API (AcceptSession…,
// AcceptNextSession…, SessionReceiver). Mirrors tests/python/test_sdk_sessions.py and
// tests/js/sessions.test.js. Wire details: contract §3.5 (session filter and lock), §6.4
// (session management operations).

package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

func sessionQueue(name string, overrides map[string]any) string {
	settings := map[string]any{"requires_session": true}
	for key, value := range overrides {
		settings[key] = value
	}
	return sharedQueue(name, settings)
}

var (
	queueSessionInterleaved = sessionQueue("go-ses-interleaved", nil)
	queueSessionNext        = sessionQueue("go-ses-next", nil)
	queueSessionLocked      = sessionQueue("go-ses-locked", nil)
	queueSessionEmpty       = sessionQueue("go-ses-empty", nil)
	queueSessionState       = sessionQueue("go-ses-state", nil)
	queueSessionRenew       = sessionQueue("go-ses-renew", map[string]any{"lock_duration": "3s"})
	queueSessionSettle      = sessionQueue("go-ses-settle", nil)
	queueSessionDeferred    = sessionQueue("go-ses-deferred", nil)
	queueSessionPeek        = sessionQueue("go-ses-peek", nil)
	queueSessionList        = sessionQueue("go-ses-list", nil)
	queueSessionExpiry      = sessionQueue("go-ses-lock-expiry", map[string]any{"lock_duration": "2s"})
	queueSessionWait        = sessionQueue("go-ses-wait", nil)
	topicSessions           = sharedTopic("go-ses-topic", []string{"sessions"}, map[string]any{"requires_session": true})
)

func sessionMessages(sessionID string, count int) []*azservicebus.Message {
	messages := make([]*azservicebus.Message, count)
	for index := range messages {
		messages[index] = &azservicebus.Message{
			MessageID: ptr(fmt.Sprintf("%s-%d", sessionID, index)),
			SessionID: ptr(sessionID),
			Body:      []byte(fmt.Sprintf("%s #%d", sessionID, index)),
		}
	}
	return messages
}

func closeSession(t *testing.T, receiver *azservicebus.SessionReceiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, receiver.Close(ctx), "SessionReceiver.Close")
}

func TestAcceptSessionReceivesOnlyItsSessionInOrder(t *testing.T) {
	// rule SES-1; contract §3.5 (session filter echoed in the attach reply)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSessionInterleaved)
	a, b := sessionMessages("A", 4), sessionMessages("B", 4)
	for index := range a {
		sendAll(t, ctx, sender, a[index], b[index])
	}
	receiverA, err := client.AcceptSessionForQueue(ctx, queueSessionInterleaved, "A", nil)
	must(t, err, "AcceptSessionForQueue A")
	if receiverA.SessionID() != "A" {
		t.Fatalf("SessionID %q", receiverA.SessionID())
	}
	if until := receiverA.LockedUntil(); !until.After(time.Now()) || time.Until(until) > 2*time.Minute {
		t.Fatalf("session LockedUntil %s should be a held lock", until)
	}
	fromA := receiveExactly(t, receiverA, 4, 10*time.Second)
	equalSlices(t, messageIDs(fromA), []string{"A-0", "A-1", "A-2", "A-3"}, "session A")
	equalSlices(t, sequenceNumbers(fromA), []int64{1, 3, 5, 7}, "sequence numbers are per queue")
	for _, got := range fromA {
		if deref(got.SessionID) != "A" {
			t.Fatalf("%s has session %q", got.MessageID, deref(got.SessionID))
		}
		must(t, receiverA.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
	assertNothingToReceive(t, receiverA)

	receiverB, err := client.AcceptSessionForQueue(ctx, queueSessionInterleaved, "B", nil)
	must(t, err, "AcceptSessionForQueue B")
	fromB := receiveExactly(t, receiverB, 4, 10*time.Second)
	equalSlices(t, messageIDs(fromB), []string{"B-0", "B-1", "B-2", "B-3"}, "session B")
	equalSlices(t, sequenceNumbers(fromB), []int64{2, 4, 6, 8}, "sequence numbers")
}

func TestAcceptNextSessionPicksTheSessionWithTheOldestMessage(t *testing.T) {
	// rule SES-2 (next available: the unlocked session with the oldest available message)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSessionNext)
	sendAll(t, ctx, sender, sessionMessages("first", 2)...)
	sendAll(t, ctx, sender, sessionMessages("second", 1)...)

	receiver, err := client.AcceptNextSessionForQueue(ctx, queueSessionNext, nil)
	must(t, err, "AcceptNextSessionForQueue")
	if receiver.SessionID() != "first" {
		t.Fatalf("the session with the oldest message comes first, got %q", receiver.SessionID())
	}
	if !receiver.LockedUntil().After(time.Now()) {
		t.Fatalf("LockedUntil %s", receiver.LockedUntil())
	}
	equalSlices(t, messageIDs(receiveExactly(t, receiver, 2, 10*time.Second)), []string{"first-0", "first-1"}, "first session")

	// "first" is locked by receiver, so the next one is "second".
	next, err := client.AcceptNextSessionForQueue(ctx, queueSessionNext, nil)
	must(t, err, "AcceptNextSessionForQueue (second)")
	if next.SessionID() != "second" {
		t.Fatalf("next session %q, want second", next.SessionID())
	}
	only := receiveExactly(t, next, 1, 10*time.Second)[0]
	if only.MessageID != "second-0" || deref(only.SessionID) != "second" {
		t.Fatalf("got %s of session %q", only.MessageID, deref(only.SessionID))
	}
}

func TestAcceptingASessionLockedByAnotherReceiverFails(t *testing.T) {
	// rule SES-2; contract §3.5 (detach com.microsoft:session-cannot-be-locked)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueSessionLocked), sessionMessages("S", 1)...)
	holder, err := client.AcceptSessionForQueue(ctx, queueSessionLocked, "S", nil)
	must(t, err, "AcceptSessionForQueue")

	started := time.Now()
	_, err = client.AcceptSessionForQueue(ctx, queueSessionLocked, "S", nil)
	expectCondition(t, err, "com.microsoft:session-cannot-be-locked", "a second AcceptSessionForQueue")
	if elapsed := time.Since(started); elapsed > 10*time.Second {
		t.Fatalf("refused after %s; expected promptly", elapsed)
	}
	// Also from a second connection.
	other := newClient(t, shared.ConnectionString(), nil)
	_, err = other.AcceptSessionForQueue(ctx, queueSessionLocked, "S", nil)
	expectCondition(t, err, "com.microsoft:session-cannot-be-locked", "AcceptSessionForQueue from another connection")

	got := receiveExactly(t, holder, 1, 10*time.Second)[0]
	if got.MessageID != "S-0" {
		t.Fatalf("the holder got %s", got.MessageID)
	}
	must(t, holder.CompleteMessage(ctx, got, nil), "CompleteMessage")
	// Closing releases the session lock: another receiver may take it.
	closeSession(t, holder)
	again, err := other.AcceptSessionForQueue(ctx, queueSessionLocked, "S", nil)
	must(t, err, "AcceptSessionForQueue after the holder closed")
	closeSession(t, again)
}

func TestAcceptNextSessionOnAnEmptyQueueTimesOutWithTheClientsDeadline(t *testing.T) {
	// rule SES-2 (waits up to the client's timeout: com.microsoft:timeout from the context's
	// deadline); contract §3.5 (detach com.microsoft:timeout → CodeTimeout)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	waitContext, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	started := time.Now()
	_, err := client.AcceptNextSessionForQueue(waitContext, queueSessionEmpty, nil)
	elapsed := time.Since(started)
	// The SDK asks the broker to wait a little less than the deadline (up to 30 ms of jitter),
	// so the broker's timeout normally arrives first; the deadline itself may win the race.
	if errorCode(err) != azservicebus.CodeTimeout && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcceptNextSessionForQueue on an empty queue: %v (code %q), want CodeTimeout", err, errorCode(err))
	}
	if elapsed < 2*time.Second || elapsed > 8*time.Second {
		t.Fatalf("gave up after %s with a 3 s deadline", elapsed)
	}
	// A session that appears later is then found by the same client.
	sendAll(t, ctx, newSender(t, client, queueSessionEmpty), sessionMessages("late", 1)...)
	receiver, err := client.AcceptNextSessionForQueue(ctx, queueSessionEmpty, nil)
	must(t, err, "AcceptNextSessionForQueue after a send")
	if receiver.SessionID() != "late" {
		t.Fatalf("session %q", receiver.SessionID())
	}
}

func TestAcceptNextSessionWaitsForASessionThatArrivesLater(t *testing.T) {
	// rule SES-2: a waiting next-session receiver gets a session sent while it waits
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	type result struct {
		receiver *azservicebus.SessionReceiver
		err      error
	}
	accepted := make(chan result, 1)
	go func() {
		waitContext, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		receiver, err := client.AcceptNextSessionForQueue(waitContext, queueSessionWait, nil)
		accepted <- result{receiver, err}
	}()
	// Give the attach time to reach the broker, then send (the wait is what is tested: the
	// receiver must be found whether it attached before or after the send).
	time.Sleep(500 * time.Millisecond)
	sendAll(t, ctx, newSender(t, client, queueSessionWait), sessionMessages("arrived", 1)...)
	outcome := <-accepted
	must(t, outcome.err, "AcceptNextSessionForQueue while waiting")
	if outcome.receiver.SessionID() != "arrived" {
		t.Fatalf("session %q", outcome.receiver.SessionID())
	}
	got := receiveExactly(t, outcome.receiver, 1, 10*time.Second)[0]
	must(t, outcome.receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
}

func TestSessionStateRoundTripsAndIsKeptPerSession(t *testing.T) {
	// rule SES-2 (state kept per session, also without messages); contract §6.4
	// set-session-state / get-session-state
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	receiver, err := client.AcceptSessionForQueue(ctx, queueSessionState, "stateful", nil)
	must(t, err, "AcceptSessionForQueue")
	state, err := receiver.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState")
	if state != nil {
		t.Fatalf("a new session has no state, got %q", state)
	}
	must(t, receiver.SetSessionState(ctx, []byte("state1"), nil), "SetSessionState")
	state, err = receiver.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState")
	if string(state) != "state1" {
		t.Fatalf("state %q", state)
	}
	binary := []byte{0x00, 0xff, 0x10, 0x80, 0x7f}
	must(t, receiver.SetSessionState(ctx, binary, nil), "SetSessionState (binary)")
	closeSession(t, receiver)

	// State is per session and survives releasing the session.
	again, err := client.AcceptSessionForQueue(ctx, queueSessionState, "stateful", nil)
	must(t, err, "AcceptSessionForQueue again")
	state, err = again.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState")
	if !bytes.Equal(state, binary) {
		t.Fatalf("state %x, want %x", state, binary)
	}
	other, err := client.AcceptSessionForQueue(ctx, queueSessionState, "other", nil)
	must(t, err, "AcceptSessionForQueue other")
	state, err = other.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState of another session")
	if state != nil {
		t.Fatalf("another session's state %q", state)
	}
	must(t, again.SetSessionState(ctx, nil, nil), "SetSessionState(nil)")
	state, err = again.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState after clearing")
	if state != nil {
		t.Fatalf("setting nil clears the state, got %q", state)
	}
}

func TestRenewSessionLockMovesLockedUntilAndKeepsTheSession(t *testing.T) {
	// rule SES-2 (the lock can be renewed); contract §6.4 renew-session-lock (lock_duration 3s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueSessionRenew), sessionMessages("R", 1)...)
	receiver, err := client.AcceptSessionForQueue(ctx, queueSessionRenew, "R", nil)
	must(t, err, "AcceptSessionForQueue")
	initial := receiver.LockedUntil()
	if remaining := time.Until(initial); remaining <= 0 || remaining > 4*time.Second {
		t.Fatalf("the session lock reflects lock_duration 3s: %s remaining", remaining)
	}
	for round := 0; round < 3; round++ {
		time.Sleep(1500 * time.Millisecond)
		before := receiver.LockedUntil()
		must(t, receiver.RenewSessionLock(ctx, nil), "RenewSessionLock")
		if !receiver.LockedUntil().After(before) {
			t.Fatalf("RenewSessionLock kept LockedUntil at %s (was %s)", receiver.LockedUntil(), before)
		}
	}
	if !time.Now().After(initial) {
		t.Fatal("the test should outlive the first session lock")
	}
	got := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if got.MessageID != "R-0" {
		t.Fatalf("got %s", got.MessageID)
	}
	must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage after the original lock time")
}

func TestAnExpiredSessionLockFreesTheSessionForAnotherReceiver(t *testing.T) {
	// rule SES-2: the session lock expires unless renewed (lock_duration 2s)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueSessionExpiry), sessionMessages("E", 1)...)
	first, err := client.AcceptSessionForQueue(ctx, queueSessionExpiry, "E", nil)
	must(t, err, "AcceptSessionForQueue")
	held := receiveExactly(t, first, 1, 10*time.Second)[0]
	other := newClient(t, shared.ConnectionString(), nil)
	_, err = other.AcceptSessionForQueue(ctx, queueSessionExpiry, "E", nil)
	expectCondition(t, err, "com.microsoft:session-cannot-be-locked", "AcceptSessionForQueue while held")
	time.Sleep(time.Until(first.LockedUntil()) + 500*time.Millisecond)
	second, err := other.AcceptSessionForQueue(ctx, queueSessionExpiry, "E", nil)
	must(t, err, "AcceptSessionForQueue after the session lock expired")
	again := receiveExactly(t, second, 1, 10*time.Second)[0]
	if again.MessageID != held.MessageID || again.DeliveryCount != held.DeliveryCount+1 {
		t.Fatalf("redelivered %s with delivery count %d (first %d)", again.MessageID, again.DeliveryCount, held.DeliveryCount)
	}
	must(t, second.CompleteMessage(ctx, again, nil), "CompleteMessage through the new session lock")
	must(t, second.RenewSessionLock(ctx, nil), "RenewSessionLock (the second keeps the session)")
	// The first receiver's link was detached (com.microsoft:session-lock-lost); the SDK's
	// attempt to take the session again is refused while the second holds it. (Settling
	// through the first receiver is retried by the SDK for a lost session lock, with seconds
	// of back-off, so it is not what this test waits for.)
	// (The first call may only find the link gone and return nothing; the next recovers.)
	receiveContext, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		stale, err := first.ReceiveMessages(receiveContext, 1, nil)
		if len(stale) != 0 {
			t.Fatalf("received %v through the expired session", describe(stale))
		}
		if err != nil {
			expectCondition(t, err, "com.microsoft:session-cannot-be-locked", "receiving through the expired session")
			break
		}
		if attempt == 3 {
			t.Fatal("receiving through the expired session kept returning nothing, without an error")
		}
	}
}

func TestCompleteAbandonAndDeadLetterWorkOnSessionMessages(t *testing.T) {
	// rules LCK-1, LCK-2, DLQ-4 on a session queue; SES-1 (an abandoned message keeps its place)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueSessionSettle), sessionMessages("settle", 3)...)
	receiver, err := client.AcceptSessionForQueue(ctx, queueSessionSettle, "settle", nil)
	must(t, err, "AcceptSessionForQueue")
	first := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if first.MessageID != "settle-0" {
		t.Fatalf("first %s", first.MessageID)
	}
	must(t, receiver.AbandonMessage(ctx, first, &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"note": "abandoned"}}), "AbandonMessage")
	again := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if again.MessageID != "settle-0" || again.DeliveryCount != 2 || again.ApplicationProperties["note"] != "abandoned" {
		t.Fatalf("an abandoned session message comes first again: %s count %d props %v", again.MessageID, again.DeliveryCount, again.ApplicationProperties)
	}
	must(t, receiver.CompleteMessage(ctx, again, nil), "CompleteMessage")
	second := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	must(t, receiver.DeadLetterMessage(ctx, second, &azservicebus.DeadLetterOptions{
		Reason: ptr("SessionReason"), ErrorDescription: ptr("dead-lettered from a session"),
	}), "DeadLetterMessage")
	third := receiveExactly(t, receiver, 1, 10*time.Second)[0]
	if third.MessageID != "settle-2" {
		t.Fatalf("third %s", third.MessageID)
	}
	must(t, receiver.CompleteMessage(ctx, third, nil), "CompleteMessage")
	assertNothingToReceive(t, receiver)

	// The dead-letter queue of a session queue is not session-enabled (DLQ-1/2).
	deadLetters := newQueueReceiver(t, client, queueSessionSettle, &azservicebus.ReceiverOptions{
		SubQueue: azservicebus.SubQueueDeadLetter, ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete,
	})
	dead := receiveExactly(t, deadLetters, 1, 10*time.Second)[0]
	if dead.MessageID != "settle-1" || deref(dead.SessionID) != "settle" ||
		deref(dead.DeadLetterReason) != "SessionReason" || deref(dead.DeadLetterErrorDescription) != "dead-lettered from a session" {
		t.Fatalf("dead letter %s session %q reason %q description %q", dead.MessageID, deref(dead.SessionID),
			deref(dead.DeadLetterReason), deref(dead.DeadLetterErrorDescription))
	}
}

func TestDeferredSessionMessagesAreReceivedBySequenceNumberThroughTheSession(t *testing.T) {
	// rule LCK-4 on a session queue; contract §6.4 receive-by-sequence-number with session-id
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sendAll(t, ctx, newSender(t, client, queueSessionDeferred), sessionMessages("def", 2)...)
	receiver, err := client.AcceptSessionForQueue(ctx, queueSessionDeferred, "def", nil)
	must(t, err, "AcceptSessionForQueue")
	received := receiveExactly(t, receiver, 2, 10*time.Second)
	for _, got := range received {
		must(t, receiver.DeferMessage(ctx, got, nil), "DeferMessage")
	}
	assertNothingToReceive(t, receiver)
	deferred, err := receiver.ReceiveDeferredMessages(ctx, sequenceNumbers(received), nil)
	must(t, err, "ReceiveDeferredMessages")
	sort.Slice(deferred, func(i, j int) bool { return *deferred[i].SequenceNumber < *deferred[j].SequenceNumber })
	equalSlices(t, messageIDs(deferred), []string{"def-0", "def-1"}, "deferred")
	for _, got := range deferred {
		if got.State != azservicebus.MessageStateDeferred {
			t.Fatalf("%s state %v", got.MessageID, got.State)
		}
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage of a deferred session message")
	}
	assertNothingToPeek(t, ctx, receiver)
}

func TestPeekOnASessionReceiverShowsOnlyItsSession(t *testing.T) {
	// peek-message with session-id (contract §6.4)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSessionPeek)
	sendAll(t, ctx, sender, sessionMessages("mine", 2)...)
	sendAll(t, ctx, sender, sessionMessages("theirs", 2)...)
	receiver, err := client.AcceptSessionForQueue(ctx, queueSessionPeek, "mine", nil)
	must(t, err, "AcceptSessionForQueue")
	peeked, err := receiver.PeekMessages(ctx, 10, nil)
	must(t, err, "PeekMessages")
	equalSlices(t, messageIDs(peeked), []string{"mine-0", "mine-1"}, "peeked")
	// Peeking locked nothing: both arrive as first deliveries.
	for _, got := range receiveExactly(t, receiver, 2, 10*time.Second) {
		if got.DeliveryCount != 1 {
			t.Fatalf("%s delivery count %d", got.MessageID, got.DeliveryCount)
		}
	}
}

func TestListSessionsNamesSessionsWithMessagesOrState(t *testing.T) {
	// get-message-sessions (contract §6.4): sessions with active messages, and sessions with
	// state (also filtered by the state's update time)
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, queueSessionList)
	sendAll(t, ctx, sender, sessionMessages("with-messages", 1)...)
	sendAll(t, ctx, sender, sessionMessages("also-messages", 2)...)
	stateful, err := client.AcceptSessionForQueue(ctx, queueSessionList, "with-state", nil)
	must(t, err, "AcceptSessionForQueue")
	before := time.Now().Add(-time.Second)
	must(t, stateful.SetSessionState(ctx, []byte("checkpoint"), nil), "SetSessionState")
	closeSession(t, stateful)

	listAll := func(options *azservicebus.ListSessionsOptions) []string {
		var ids []string
		pager := client.NewListSessionsForQueuePager(queueSessionList, options)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			must(t, err, "NextPage")
			ids = append(ids, page.Sessions...)
		}
		sort.Strings(ids)
		return ids
	}
	equalSlices(t, listAll(nil), []string{"also-messages", "with-messages", "with-state"}, "sessions")
	equalSlices(t, listAll(&azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: &before}), []string{"with-state"},
		"sessions whose state was updated after the set")
	future := time.Now().Add(time.Hour)
	equalSlices(t, listAll(&azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: &future}), []string{},
		"sessions updated in the future")
}

func TestSessionSubscriptionsAcceptNamedAndNextSessions(t *testing.T) {
	// rules SES-1, SES-2 on a session-enabled subscription
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	sender := newSender(t, client, topicSessions)
	sendAll(t, ctx, sender, sessionMessages("one", 2)...)
	sendAll(t, ctx, sender, sessionMessages("two", 1)...)

	named, err := client.AcceptSessionForSubscription(ctx, topicSessions, "sessions", "two", nil)
	must(t, err, "AcceptSessionForSubscription")
	got := receiveExactly(t, named, 1, 10*time.Second)
	equalSlices(t, messageIDs(got), []string{"two-0"}, "session two")
	must(t, named.CompleteMessage(ctx, got[0], nil), "CompleteMessage")

	next, err := client.AcceptNextSessionForSubscription(ctx, topicSessions, "sessions", nil)
	must(t, err, "AcceptNextSessionForSubscription")
	if next.SessionID() != "one" {
		t.Fatalf("next session %q", next.SessionID())
	}
	must(t, next.SetSessionState(ctx, []byte("sub-state"), nil), "SetSessionState on a subscription session")
	state, err := next.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState")
	if string(state) != "sub-state" {
		t.Fatalf("state %q", state)
	}
	must(t, next.RenewSessionLock(ctx, nil), "RenewSessionLock on a subscription session")
	fromOne := receiveExactly(t, next, 2, 10*time.Second)
	equalSlices(t, messageIDs(fromOne), []string{"one-0", "one-1"}, "session one")
	for _, message := range fromOne {
		must(t, next.CompleteMessage(ctx, message, nil), "CompleteMessage")
	}
	var ids []string
	pager := client.NewListSessionsForSubscriptionPager(topicSessions, "sessions", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, err, "NextPage")
		ids = append(ids, page.Sessions...)
	}
	equalSlices(t, ids, []string{"one"}, "sessions of the subscription (state kept, messages gone)")
}

func TestAPlainReceiverOfASessionQueueIsRefused(t *testing.T) {
	// a session-enabled entity needs a session receiver: the broker refuses the attach
	t.Parallel()
	ctx := testContext(t)
	client := sharedClient(t)
	receiver := newQueueReceiver(t, client, queueSessionPeek, nil)
	receiveContext, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := receiver.ReceiveMessages(receiveContext, 1, nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a non-session receiver of a session queue: %v, want a refusal", err)
	}
	expectCondition(t, err, amqp.ErrCondNotAllowed, "a non-session receiver of a session queue")
}
