// Package sdk_test drives the real ferrobus binary with the unmodified official Go SDK
// (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus and its admin package).
//
// TestMain starts the shared broker, which serves every entity in sharedConfig(); each test owns
// its entities, so tests are independent of order and may run in parallel. Tests that need the
// development CA (the admin client over HTTPS, TLS, WebSockets) or keys of their own start a
// dedicated broker with harness.StartForTest. Rule IDs refer to /work/shared/SEMANTICS.md.
//
// Both auth modes (FERROBUS_TEST_AUTH, see the harness package); tests/go/run.sh runs each.
package sdk_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"

	"ferrobus/tests/go/harness"
)

// shared is the broker of every test that needs no broker of its own.
var shared *harness.Broker

// sharedEntities: name -> queue overrides of harness.QueueDefaults; one (or a few) per test.
var sharedQueues = map[string]map[string]any{}

// sharedTopics: the topics of the shared broker and their subscriptions' settings.
var sharedTopics []string

func sharedQueue(name string, overrides map[string]any) string {
	if overrides == nil {
		overrides = map[string]any{}
	}
	sharedQueues[name] = overrides
	return name
}

func sharedTopic(name string, subscriptions []string, settings map[string]any) string {
	sharedTopics = append(sharedTopics, harness.TopicTOML(name, subscriptions, settings))
	return name
}

func sharedConfig() string {
	config := harness.QueuesTOML(sharedQueues)
	for _, topic := range sharedTopics {
		config += topic
	}
	return config
}

func TestMain(m *testing.M) {
	broker, err := harness.Start(sharedConfig(), harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = broker
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- shared ferrobus stderr tail (port %d, full log %s) ---\n%s\n",
			broker.Port, broker.LogPath, broker.LogTail(60))
	}
	broker.Stop()
	if code == 0 {
		broker.Remove()
	}
	stopTransportBroker(code != 0)
	stopAuthBroker(code != 0)
	os.Exit(code)
}

// testTimeout bounds every test's operations; a hang fails the test instead of the run.
const testTimeout = 60 * time.Second

// absenceWait is how long a test waits to conclude that nothing (more) will be delivered.
const absenceWait = 1500 * time.Millisecond

// testContext is the context of one test's operations.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// noRetries: a retried operation that succeeds on its second attempt would hide a broker
// failure on the first.
var noRetries = azservicebus.RetryOptions{MaxRetries: -1}

// policyNoRetries is the admin client's equivalent of noRetries.
var policyNoRetries = policy.RetryOptions{MaxRetries: -1}

// newClient opens a client on connectionString, closed when the test ends.
func newClient(t *testing.T, connectionString string, options *azservicebus.ClientOptions) *azservicebus.Client {
	t.Helper()
	if options == nil {
		options = &azservicebus.ClientOptions{}
	}
	options.RetryOptions = noRetries
	client, err := azservicebus.NewClientFromConnectionString(connectionString, options)
	if err != nil {
		t.Fatalf("NewClientFromConnectionString: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Close(ctx)
	})
	return client
}

// sharedClient is a client of the shared broker.
func sharedClient(t *testing.T) *azservicebus.Client {
	t.Helper()
	t.Cleanup(func() { shared.ReportOnFailure(t) })
	return newClient(t, shared.ConnectionString(), nil)
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func newSender(t *testing.T, client *azservicebus.Client, entity string) *azservicebus.Sender {
	t.Helper()
	sender, err := client.NewSender(entity, nil)
	must(t, err, "NewSender "+entity)
	return sender
}

func newQueueReceiver(t *testing.T, client *azservicebus.Client, queue string, options *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	receiver, err := client.NewReceiverForQueue(queue, options)
	must(t, err, "NewReceiverForQueue "+queue)
	return receiver
}

func sendAll(t *testing.T, ctx context.Context, sender *azservicebus.Sender, messages ...*azservicebus.Message) {
	t.Helper()
	for _, message := range messages {
		must(t, sender.SendMessage(ctx, message, nil), "SendMessage")
	}
}

// messageReceiver is what Receiver and SessionReceiver share.
type messageReceiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	PeekMessages(ctx context.Context, maxMessageCount int, options *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receiveExactly receives until count messages arrived; fails if they don't within timeout.
func receiveExactly(t *testing.T, receiver messageReceiver, count int, timeout time.Duration) []*azservicebus.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var received []*azservicebus.ReceivedMessage
	for len(received) < count {
		batch, err := receiver.ReceiveMessages(ctx, count-len(received), nil)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Fatalf("ReceiveMessages after %d of %d messages: %v", len(received), count, err)
		}
		received = append(received, batch...)
	}
	if len(received) != count {
		t.Fatalf("expected %d messages, received %d within %s: %v", count, len(received), timeout, describe(received))
	}
	return received
}

// assertNothingToReceive fails if a message arrives within absenceWait.
func assertNothingToReceive(t *testing.T, receiver messageReceiver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), absenceWait)
	defer cancel()
	unexpected, err := receiver.ReceiveMessages(ctx, 10, nil)
	if len(unexpected) > 0 {
		t.Fatalf("expected no message to be receivable, got %v", describe(unexpected))
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReceiveMessages while expecting nothing: %v", err)
	}
}

// assertNothingToPeek fails if the entity still holds a message.
func assertNothingToPeek(t *testing.T, ctx context.Context, receiver messageReceiver) {
	t.Helper()
	peeked, err := receiver.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
	must(t, err, "PeekMessages")
	if len(peeked) > 0 {
		t.Fatalf("expected an empty entity, peeked %v", describe(peeked))
	}
}

func describe(messages []*azservicebus.ReceivedMessage) []string {
	out := make([]string, 0, len(messages))
	for _, message := range messages {
		sequence := int64(-1)
		if message.SequenceNumber != nil {
			sequence = *message.SequenceNumber
		}
		out = append(out, fmt.Sprintf("%s#%d(%q)", message.MessageID, sequence, message.Body))
	}
	return out
}

func messageIDs(messages []*azservicebus.ReceivedMessage) []string {
	ids := make([]string, 0, len(messages))
	for _, message := range messages {
		ids = append(ids, message.MessageID)
	}
	return ids
}

func bodies(messages []*azservicebus.ReceivedMessage) []string {
	out := make([]string, 0, len(messages))
	for _, message := range messages {
		out = append(out, string(message.Body))
	}
	return out
}

func sequenceNumbers(messages []*azservicebus.ReceivedMessage) []int64 {
	out := make([]int64, 0, len(messages))
	for _, message := range messages {
		if message.SequenceNumber == nil {
			out = append(out, -1)
			continue
		}
		out = append(out, *message.SequenceNumber)
	}
	return out
}

func ptr[T any](value T) *T { return &value }

func deref[T any](value *T) T {
	var zero T
	if value == nil {
		return zero
	}
	return *value
}

func message(id, body string) *azservicebus.Message {
	return &azservicebus.Message{MessageID: ptr(id), Body: []byte(body)}
}

func uniqueID(prefix string) string {
	var random [6]byte
	_, _ = rand.Read(random[:])
	return fmt.Sprintf("%s-%x", prefix, random)
}

// errorCode is the SDK's *azservicebus.Error code of err, or "" if err is not one.
func errorCode(err error) azservicebus.Code {
	var sbError *azservicebus.Error
	if errors.As(err, &sbError) {
		return sbError.Code
	}
	return ""
}

// amqpCondition is the AMQP error condition err carries (what the SDK surfaces for conditions it
// has no code for, e.g. amqp:not-found on attach), or "".
func amqpCondition(err error) amqp.ErrCond {
	var amqpError *amqp.Error
	if errors.As(err, &amqpError) {
		return amqpError.Condition
	}
	return ""
}

func expectCode(t *testing.T, err error, code azservicebus.Code, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected an error with code %q, but it succeeded", what, code)
	}
	if got := errorCode(err); got != code {
		t.Fatalf("%s: expected code %q, got %q: %v", what, code, got, err)
	}
}

func expectCondition(t *testing.T, err error, condition amqp.ErrCond, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: expected an error with condition %q, but it succeeded", what, condition)
	}
	if got := amqpCondition(err); got != condition {
		t.Fatalf("%s: expected condition %q, got %q: %v", what, condition, got, err)
	}
}

func assertNear(t *testing.T, value *time.Time, tolerance time.Duration, what string) {
	t.Helper()
	if value == nil {
		t.Fatalf("%s is nil", what)
	}
	if skew := time.Since(*value); skew > tolerance || skew < -tolerance {
		t.Fatalf("%s %s is %s away from now", what, value.Format(time.RFC3339Nano), skew)
	}
}

func equalSlices[T comparable](t *testing.T, got, want []T, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for index := range got {
		if got[index] != want[index] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// durableBroker starts a broker of the test's own on a data directory (for the development CA
// the admin client, TLS and WebSockets need), stopped when the test ends.
func durableBroker(t *testing.T, config string) *harness.Broker {
	t.Helper()
	return harness.StartForTest(t, config, harness.Options{Durable: true})
}

// newAdminClient is an admin.Client for broker over HTTPS on its AMQP port, trusting the
// development CA (the Go equivalent of Python's connection_verify), with no retries.
func newAdminClient(t *testing.T, broker *harness.Broker, connectionString string) *admin.Client {
	t.Helper()
	tlsConfig, err := broker.TLSConfig()
	must(t, err, "development CA")
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	client, err := admin.NewClientFromConnectionString(connectionString, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Transport: transport, Timeout: 20 * time.Second},
			Retry:     policyNoRetries,
		},
	})
	must(t, err, "admin.NewClientFromConnectionString")
	return client
}
