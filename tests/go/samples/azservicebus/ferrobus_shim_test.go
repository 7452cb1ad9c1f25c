// Not from the SDK: ferrobus' shim around the SDK's own examples (the example_*_test.go files
// beside it, unmodified, see ../SOURCE.md). `go test` compiles the examples but runs none (they
// have no `// Output:`), and most use package variables (client, sender, receiver,
// connectionString, endpoint, tokenCredential) that example_shared_test.go leaves empty. With
// FERROBUS_SAMPLE=<name> this TestMain instead runs that one example against the broker named
// by FERROBUS_CONNECTION_STRING: it fills those variables (and only those) the way the example
// expects, puts in the entity what the example reads (its messages, its sessions), runs it,
// and checks on the broker what the example should have done. The last line it prints is
// "FERROBUS-SAMPLE-RESULT<TAB>pass|fail<TAB>cause"; the exit status says the same. An example
// that panics fails; one that calls log.Fatal exits 1 by itself. FERROBUS_SAMPLE=list prints
// the catalogue: "name<TAB>run|not-run<TAB>cause". tests/go/samples/run drives it.

package azservicebus_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The entity names the examples hard-code; tests/go/samples/run configures them.
const (
	exampleQueue            = "exampleQueue"
	exampleSessionQueue     = "exampleSessionQueue"
	exampleTopic            = "exampleTopic"
	exampleSubscription     = "exampleSubscription" // session-enabled: the session examples use it
	exampleTopicName        = "exampleTopicName"
	exampleSubscriptionName = "exampleSubscriptionName"
	exampleSessionID        = "exampleSessionId"
	myQueue                 = "myqueue"
)

// sample is one example: what the shim puts in place before, and what it checks after.
type sample struct {
	run func()
	// notRun, when set, is why the example is not run.
	notRun string
	// what the example does, for the result line.
	does    string
	prepare func(*shim) error
	// verify is retried until it passes or the deadline: some examples leave goroutines
	// behind whose effects come later.
	verify func(s *shim, output string) error
	// forever: the example loops by design; it passes once verify accepts its output so far
	// and the process ends with the example still running.
	forever bool
}

var catalogue = map[string]sample{
	"ExampleNewClient": {run: ExampleNewClient,
		notRun: "needs a cloud identity: azidentity.NewDefaultAzureCredential and a *.servicebus.windows.net namespace"},
	"ExampleNewClient_usingCustomEndpoint": {run: ExampleNewClient_usingCustomEndpoint,
		notRun: "needs a cloud identity: azidentity.NewDefaultAzureCredential and a *.servicebus.windows.net namespace"},
	"Example_unitTesting": {run: Example_unitTesting,
		notRun: "drives a fake receiver: nothing reaches a broker"},
	"TestUnitTestingReceiver": {
		notRun: "a unit test of a fake receiver: nothing reaches a broker"},

	"ExampleNewClientFromConnectionString": {run: ExampleNewClientFromConnectionString,
		does: "client from the connection string (connectionString); the shim sends and peeks through it",
		verify: func(s *shim, _ string) error {
			if client == nil {
				return fmt.Errorf("client is nil")
			}
			if err := sendThrough(client, exampleQueue, "through the example's client"); err != nil {
				return err
			}
			return s.expectBodies(exampleQueue, "through the example's client")
		}},
	"ExampleNewClient_configuringRetries": {run: ExampleNewClient_configuringRetries,
		does: "NewClient with a token credential and retry options; sends nothing",
		prepare: func(s *shim) error {
			endpoint, tokenCredential = s.host, s.credential()
			return nil
		},
		verify: func(*shim, string) error { return notNil(client, "client") }},
	"Example_enablingLogging": {run: Example_enablingLogging,
		does: "turns on the SDK's log; the shim's next send is logged",
		verify: func(s *shim, output string) error {
			if err := sendThrough(s.client, exampleQueue, "logged"); err != nil {
				return err
			}
			if !strings.Contains(s.output(), "[azsb.Conn]") || !strings.Contains(s.output(), "[azsb.Auth]") {
				return fmt.Errorf("no [azsb.Conn]/[azsb.Auth] log line after a send")
			}
			return nil
		}},
	"ExampleClient_NewListSessionsForQueuePager": {run: ExampleClient_NewListSessionsForQueuePager,
		does: "lists the sessions of exampleSessionQueue",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleSessionQueue, sessionMessage(exampleSessionID, "listed"))
		},
		verify: contains("Session ID: " + exampleSessionID + "\n")},
	"ExampleClient_NewListSessionsForSubscriptionPager": {run: ExampleClient_NewListSessionsForSubscriptionPager,
		does: "lists the sessions of exampleTopic/exampleSubscription",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleTopic, sessionMessage(exampleSessionID, "listed"))
		},
		verify: contains("Session ID: " + exampleSessionID + "\n")},
	"ExampleClient_NewListSessionsForQueuePager_filteringBySessionStateUpdateTime": {
		run:  ExampleClient_NewListSessionsForQueuePager_filteringBySessionStateUpdateTime,
		does: "lists the sessions whose state changed in the last 7 days",
		prepare: func(s *shim) error {
			client = s.client
			if err := s.send(exampleSessionQueue, sessionMessage("no-state", "x")); err != nil {
				return err
			}
			return s.setSessionState(exampleSessionQueue, "with-state", []byte("checkpoint"))
		},
		verify: func(s *shim, output string) error {
			if err := contains("Recently updated session ID: with-state\n")(s, output); err != nil {
				return err
			}
			if strings.Contains(output, "no-state") {
				return fmt.Errorf("a session without state was listed: %q", output)
			}
			return nil
		}},
	"ExampleClient_NewReceiverForSubscription": {run: ExampleClient_NewReceiverForSubscription,
		does:    "creates and closes a receiver (its link attaches on first use)",
		prepare: useClient, verify: func(*shim, string) error { return notNil(receiver, "receiver") }},
	"ExampleClient_NewReceiverForQueue": {run: ExampleClient_NewReceiverForQueue,
		does:    "creates and closes a receiver (its link attaches on first use)",
		prepare: useClient, verify: func(*shim, string) error { return notNil(receiver, "receiver") }},
	"ExampleClient_NewReceiverForQueue_deadLetterQueue": {run: ExampleClient_NewReceiverForQueue_deadLetterQueue,
		does:    "creates and closes a dead-letter receiver (its link attaches on first use)",
		prepare: useClient, verify: func(*shim, string) error { return notNil(receiver, "receiver") }},
	"ExampleClient_NewReceiverForSubscription_deadLetterQueue": {run: ExampleClient_NewReceiverForSubscription_deadLetterQueue,
		does:    "creates and closes a dead-letter receiver (its link attaches on first use)",
		prepare: useClient, verify: func(*shim, string) error { return notNil(receiver, "receiver") }},
	"ExampleReceiver_ReceiveMessages": {run: ExampleReceiver_ReceiveMessages,
		does: "receives a message of exampleQueue and completes it",
		prepare: func(s *shim) error {
			if err := s.useReceiver(exampleQueue, nil); err != nil {
				return err
			}
			return s.send(exampleQueue, &azservicebus.Message{Body: []byte("hello")})
		},
		verify: all(contains("Message received with body: hello\n"), contains("Received and completed the message\n"),
			func(s *shim, _ string) error { return s.expectBodies(exampleQueue) })},
	"ExampleReceiver_ReceiveMessages_receiveAndDelete": {run: ExampleReceiver_ReceiveMessages_receiveAndDelete,
		does: "receives exampleQueue's messages in receive-and-delete mode, closes, empties the cache",
		prepare: func(s *shim) error {
			if err := s.useReceiver(exampleQueue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}); err != nil {
				return err
			}
			return s.send(exampleQueue, &azservicebus.Message{Body: []byte("one")}, &azservicebus.Message{Body: []byte("two")},
				&azservicebus.Message{Body: []byte("three")})
		},
		verify: all(contains("Message received with body: one\n"), contains("Message received with body: two\n"),
			contains("Message received with body: three\n"),
			func(s *shim, _ string) error { return s.expectBodies(exampleQueue) })},
	"ExampleReceiver_ReceiveMessages_amqpMessage": {run: ExampleReceiver_ReceiveMessages_amqpMessage,
		does: "receives a message as its AMQP message and completes it",
		prepare: func(s *shim) error {
			if err := s.useReceiver(exampleQueue, nil); err != nil {
				return err
			}
			return s.send(exampleQueue, &azservicebus.Message{Body: []byte("raw")})
		},
		verify: func(s *shim, _ string) error { return s.expectBodies(exampleQueue) }},
	"ExampleReceiver_DeadLetterMessage": {run: ExampleReceiver_DeadLetterMessage,
		does: "sends to myqueue, receives and dead-letters with a reason and a description",
		prepare: func(s *shim) error {
			client = s.client
			var err error
			sender, err = s.client.NewSender(myQueue, nil)
			return err
		},
		verify: func(s *shim, _ string) error {
			dead, err := s.peek(myQueue, azservicebus.SubQueueDeadLetter)
			if err != nil {
				return err
			}
			if len(dead) != 1 || string(dead[0].Body) != "body of message" ||
				value(dead[0].DeadLetterReason) != "exampleReason" || value(dead[0].DeadLetterErrorDescription) != "exampleErrorDescription" {
				return fmt.Errorf("myqueue's dead letters: %s", describe(dead))
			}
			return s.expectBodies(myQueue)
		}},
	"ExampleReceiver_ReceiveMessages_second": {run: ExampleReceiver_ReceiveMessages_second,
		does: "receives myqueue's dead letters, prints reason and description, completes them",
		prepare: func(s *shim) error {
			client = s.client
			return s.deadLetter(myQueue, "dead", "prepared-reason", "prepared-description")
		},
		verify: all(contains("DeadLetter Reason: prepared-reason\nDeadLetter Description: prepared-description\n"),
			func(s *shim, _ string) error {
				dead, err := s.peek(myQueue, azservicebus.SubQueueDeadLetter)
				if err == nil && len(dead) != 0 {
					err = fmt.Errorf("dead letters left: %s", describe(dead))
				}
				return err
			})},
	"Example_settleWithLockToken": {run: Example_settleWithLockToken,
		does: "renews the lock and completes with only the lock token",
		prepare: func(s *shim) error {
			if err := s.useReceiver(exampleQueue, nil); err != nil {
				return err
			}
			return s.send(exampleQueue, &azservicebus.Message{Body: []byte("settle me")})
		},
		verify: all(contains("Message received with body: settle me\n"), contains("Received and completed the message\n"),
			func(s *shim, _ string) error { return s.expectBodies(exampleQueue) })},
	"Example_autoRenewLocks": {run: Example_autoRenewLocks,
		does: "receives a message and renews its lock in a goroutine",
		prepare: func(s *shim) error {
			if err := s.useReceiver(exampleQueue, nil); err != nil {
				return err
			}
			return s.send(exampleQueue, &azservicebus.Message{MessageID: ptr("renew-me"), Body: []byte("held")})
		},
		verify: all(contains("Renewed lock for renew-me"), func(s *shim, _ string) error {
			// Still there, and locked by the example's receiver: nobody else gets it.
			got, err := s.receiveFor(exampleQueue, time.Second)
			if err == nil && len(got) != 0 {
				err = fmt.Errorf("the renewed message was delivered to another receiver: %s", describe(got))
			}
			if err == nil {
				err = s.expectBodies(exampleQueue, "held")
			}
			return err
		})},
	"ExampleClient_NewSender": {run: ExampleClient_NewSender,
		does:    `creates and closes a sender for "<queue or topic>" (its link attaches on first send)`,
		prepare: useClient, verify: func(*shim, string) error { return notNil(sender, "sender") }},
	"ExampleSender_SendMessage_message": {run: ExampleSender_SendMessage_message,
		does: "sends one message", prepare: useSender,
		verify: func(s *shim, _ string) error { return s.expectBodies(exampleQueue, "hello, this is a message") }},
	"ExampleSender_SendMessage_messageBatch": {run: ExampleSender_SendMessage_messageBatch,
		does: "sends a batch", prepare: useSender,
		verify: func(s *shim, _ string) error { return s.expectBodies(exampleQueue, "hello world") }},
	"ExampleSender_ScheduleMessages": {run: ExampleSender_ScheduleMessages,
		does: "schedules and cancels a message, then sends one with ScheduledEnqueueTime", prepare: useSender,
		verify: func(s *shim, _ string) error {
			peeked, err := s.peek(exampleQueue, 0)
			if err != nil {
				return err
			}
			if len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateScheduled || peeked[0].ScheduledEnqueueTime == nil ||
				time.Until(*peeked[0].ScheduledEnqueueTime) < 50*time.Minute {
				return fmt.Errorf("want one message scheduled an hour ahead, peeked %s", describe(peeked))
			}
			return nil
		}},
	"ExampleSender_SendAMQPAnnotatedMessage": {run: ExampleSender_SendAMQPAnnotatedMessage,
		does: "sends an AMQP value body with message and delivery annotations", prepare: useSender,
		verify: func(s *shim, _ string) error {
			got, err := s.receiveFor(exampleQueue, 5*time.Second)
			if err != nil {
				return err
			}
			if len(got) != 1 || got[0].RawAMQPMessage.Body.Value != "hello" ||
				got[0].RawAMQPMessage.MessageAnnotations["x-opt-message-test"] != "test-annotation-value" {
				return fmt.Errorf("received %s", describe(got))
			}
			return nil
		}},
	"ExampleClient_AcceptSessionForQueue": {run: ExampleClient_AcceptSessionForQueue,
		does: "accepts exampleSessionId, renews its lock, receives and completes",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleSessionQueue, sessionMessage(exampleSessionID, "in the session"))
		},
		verify: all(contains(`Received message from session ID "exampleSessionId" and completed it`),
			func(s *shim, _ string) error { return s.expectSessionEmpty(exampleSessionQueue, exampleSessionID) })},
	"ExampleClient_AcceptSessionForSubscription": {run: ExampleClient_AcceptSessionForSubscription,
		does: "accepts exampleSessionId of exampleTopic/exampleSubscription and closes it",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleTopic, sessionMessage(exampleSessionID, "kept"))
		},
		verify: func(s *shim, _ string) error {
			// Closing released the session: the shim takes it, and the message is still there.
			receiver, err := s.client.AcceptSessionForSubscription(s.ctx, exampleTopic, exampleSubscription, exampleSessionID, nil)
			if err != nil {
				return err
			}
			defer receiver.Close(s.ctx)
			peeked, err := receiver.PeekMessages(s.ctx, 10, nil)
			if err == nil && (len(peeked) != 1 || string(peeked[0].Body) != "kept") {
				err = fmt.Errorf("peeked %s", describe(peeked))
			}
			return err
		}},
	"ExampleClient_AcceptNextSessionForQueue": {run: ExampleClient_AcceptNextSessionForQueue, forever: true,
		does: "loops forever by design (for {} accepting sessions); passed once it was assigned the waiting session",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleSessionQueue, sessionMessage(exampleSessionID, "waiting"))
		},
		verify: contains(`Session receiver was assigned session ID "exampleSessionId"`)},
	"ExampleClient_AcceptNextSessionForSubscription": {run: ExampleClient_AcceptNextSessionForSubscription, forever: true,
		does: "loops forever by design (for {} accepting sessions); passed once it was assigned the waiting session",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleTopicName, sessionMessage(exampleSessionID, "waiting"))
		},
		verify: contains(`Session receiver was assigned session ID "exampleSessionId"`)},
	"ExampleClient_AcceptNextSessionForQueue_roundrobin": {run: ExampleClient_AcceptNextSessionForQueue_roundrobin,
		does: "takes every session with messages in turn, until none is left (the broker's 60 s wait)",
		prepare: func(s *shim) error {
			client = s.client
			return s.send(exampleSessionQueue, sessionMessage("first", "1"), sessionMessage("second", "2"))
		},
		verify: all(contains("Received message for session first, message ID first-0\n"),
			contains("Received message for session second, message ID second-0\n"), contains("No sessions available\n"),
			func(s *shim, _ string) error {
				if err := s.expectSessionEmpty(exampleSessionQueue, "first"); err != nil {
					return err
				}
				return s.expectSessionEmpty(exampleSessionQueue, "second")
			})},
	"ExampleNewClient_usingWebsocketsAndProxies": {run: ExampleNewClient_usingWebsocketsAndProxies,
		does: "NewClient with NewWebSocketConn (github.com/coder/websocket) and a token credential, closed; sends nothing",
		prepare: func(s *shim) error {
			endpoint, tokenCredential = s.host, s.credential()
			return nil
		},
		verify: func(*shim, string) error { return notNil(client, "client") }},
}

func TestMain(m *testing.M) {
	name := os.Getenv("FERROBUS_SAMPLE")
	switch name {
	case "":
		os.Exit(m.Run())
	case "list":
		for _, line := range catalogueLines() {
			fmt.Println(line)
		}
		os.Exit(0)
	}
	os.Exit(runSample(name))
}

func catalogueLines() []string {
	var lines []string
	for name, entry := range catalogue {
		if entry.notRun != "" {
			lines = append(lines, name+"\tnot-run\t"+entry.notRun)
		} else {
			lines = append(lines, name+"\trun\t"+entry.does)
		}
	}
	return lines
}

// shim holds the broker connection the shim prepares and verifies with (never the example's).
type shim struct {
	ctx    context.Context
	client *azservicebus.Client
	host   string
	key    [2]string
	buffer *syncBuffer
}

func result(pass bool, cause string) int {
	cause = strings.Join(strings.Fields(cause), " ")
	if pass {
		fmt.Printf("\nFERROBUS-SAMPLE-RESULT\tpass\t%s\n", cause)
		return 0
	}
	fmt.Printf("\nFERROBUS-SAMPLE-RESULT\tfail\t%s\n", cause)
	return 1
}

func runSample(name string) int {
	entry, known := catalogue[name]
	if !known {
		return result(false, "no such sample in the shim's catalogue")
	}
	if entry.notRun != "" {
		return result(false, "not run: "+entry.notRun)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	connectionString = os.Getenv("FERROBUS_CONNECTION_STRING")
	check, err := azservicebus.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return result(false, "shim: "+err.Error())
	}
	s := &shim{ctx: ctx, client: check, buffer: &syncBuffer{}}
	s.host, s.key = parseConnectionString(connectionString)
	if entry.prepare != nil {
		if err := entry.prepare(s); err != nil {
			return result(false, "shim could not prepare: "+err.Error())
		}
	}

	// The example's stdout and log output go to the buffer (and on to stderr, for the log).
	realStdout := os.Stdout
	reader, writer, _ := os.Pipe()
	os.Stdout = writer
	log.SetOutput(writer)
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.MultiWriter(s.buffer, os.Stderr), reader)
		close(copied)
	}()
	restore := func() {
		os.Stdout = realStdout
		log.SetOutput(os.Stderr)
	}

	done := make(chan any, 1)
	started := time.Now()
	go func() {
		defer func() { done <- recover() }()
		entry.run()
	}()

	verifyUntil := func(deadline time.Time) error {
		for {
			err := entry.verify(s, s.output())
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	if entry.forever {
		err := verifyUntil(time.Now().Add(30 * time.Second))
		select {
		case recovered := <-done:
			restore()
			if recovered != nil {
				return result(false, fmt.Sprintf("panicked: %v", recovered))
			}
			return result(false, "returned, but it should loop forever")
		default:
		}
		restore()
		if err != nil {
			return result(false, "still looping after 30 s; "+err.Error())
		}
		return result(true, entry.does)
	}

	select {
	case recovered := <-done:
		if recovered != nil {
			restore()
			return result(false, fmt.Sprintf("panicked: %v", recovered))
		}
	case <-ctx.Done():
		restore()
		return result(false, "did not return within 150 s")
	}
	elapsed := time.Since(started)
	err = verifyUntil(time.Now().Add(10 * time.Second))
	restore()
	_ = writer.Close()
	<-copied
	if err != nil {
		return result(false, "returned after "+elapsed.Round(time.Millisecond).String()+", but "+err.Error())
	}
	return result(true, entry.does)
}

func (s *shim) output() string { return s.buffer.String() }

// syncBuffer is the example's output, written by the copier and read by verify.
type syncBuffer struct {
	mutex  sync.Mutex
	buffer bytes.Buffer
}

func (b *syncBuffer) Write(data []byte) (int, error) {
	b.mutex.Lock()
	defer b.mutex.Unlock()
	return b.buffer.Write(data)
}

func (b *syncBuffer) String() string {
	b.mutex.Lock()
	defer b.mutex.Unlock()
	return b.buffer.String()
}

func parseConnectionString(text string) (host string, key [2]string) {
	for _, part := range strings.Split(text, ";") {
		name, value, _ := strings.Cut(part, "=")
		switch strings.ToLower(name) {
		case "endpoint":
			if parsed, err := url.Parse(value); err == nil {
				host = parsed.Host
			}
		case "sharedaccesskeyname":
			key[0] = value
		case "sharedaccesskey":
			key[1] = value
		}
	}
	return host, key
}

// sasCredential is a TokenCredential that signs Service Bus SAS tokens with the connection
// string's key: what the examples' `tokenCredential` stands for.
type sasCredential struct{ host, keyName, key string }

func (s *shim) credential() azcore.TokenCredential {
	return sasCredential{host: s.host, keyName: s.key[0], key: s.key[1]}
}

func (c sasCredential) GetToken(_ context.Context, _ policy.TokenRequestOptions) (azcore.AccessToken, error) {
	expiry := time.Now().Add(time.Hour)
	audience := url.QueryEscape("sb://" + c.host + "/")
	mac := hmac.New(sha256.New, []byte(c.key))
	mac.Write([]byte(audience + "\n" + strconv.FormatInt(expiry.Unix(), 10)))
	signature := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	token := fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%d&skn=%s", audience, signature, expiry.Unix(), c.keyName)
	return azcore.AccessToken{Token: token, ExpiresOn: expiry}, nil
}

func useClient(s *shim) error {
	client = s.client
	return nil
}

func useSender(s *shim) error {
	client = s.client
	var err error
	sender, err = s.client.NewSender(exampleQueue, nil)
	return err
}

func (s *shim) useReceiver(queue string, options *azservicebus.ReceiverOptions) error {
	client = s.client
	var err error
	receiver, err = s.client.NewReceiverForQueue(queue, options)
	return err
}

func sendThrough(through *azservicebus.Client, entity, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sender, err := through.NewSender(entity, nil)
	if err != nil {
		return err
	}
	defer sender.Close(ctx)
	return sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil)
}

func (s *shim) send(entity string, messages ...*azservicebus.Message) error {
	sender, err := s.client.NewSender(entity, nil)
	if err != nil {
		return err
	}
	defer sender.Close(s.ctx)
	for _, message := range messages {
		if err := sender.SendMessage(s.ctx, message, nil); err != nil {
			return err
		}
	}
	return nil
}

func sessionMessage(sessionID, body string) *azservicebus.Message {
	return &azservicebus.Message{MessageID: ptr(sessionID + "-0"), SessionID: ptr(sessionID), Body: []byte(body)}
}

func (s *shim) setSessionState(queue, sessionID string, state []byte) error {
	receiver, err := s.client.AcceptSessionForQueue(s.ctx, queue, sessionID, nil)
	if err != nil {
		return err
	}
	defer receiver.Close(s.ctx)
	return receiver.SetSessionState(s.ctx, state, nil)
}

func (s *shim) deadLetter(queue, body, reason, description string) error {
	if err := s.send(queue, &azservicebus.Message{Body: []byte(body)}); err != nil {
		return err
	}
	receiver, err := s.client.NewReceiverForQueue(queue, nil)
	if err != nil {
		return err
	}
	defer receiver.Close(s.ctx)
	messages, err := receiver.ReceiveMessages(s.ctx, 1, nil)
	if err != nil {
		return err
	}
	return receiver.DeadLetterMessage(s.ctx, messages[0], &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &description})
}

func (s *shim) peek(queue string, subQueue azservicebus.SubQueue) ([]*azservicebus.ReceivedMessage, error) {
	receiver, err := s.client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{SubQueue: subQueue})
	if err != nil {
		return nil, err
	}
	defer receiver.Close(s.ctx)
	return receiver.PeekMessages(s.ctx, 20, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(0))})
}

// receiveFor receives (and deletes) whatever arrives within wait.
func (s *shim) receiveFor(queue string, wait time.Duration) ([]*azservicebus.ReceivedMessage, error) {
	receiver, err := s.client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		return nil, err
	}
	defer receiver.Close(s.ctx)
	ctx, cancel := context.WithTimeout(s.ctx, wait)
	defer cancel()
	messages, err := receiver.ReceiveMessages(ctx, 10, nil)
	if ctx.Err() != nil {
		err = nil
	}
	return messages, err
}

// expectBodies: the queue holds exactly these bodies, in order.
func (s *shim) expectBodies(queue string, want ...string) error {
	peeked, err := s.peek(queue, 0)
	if err != nil {
		return err
	}
	var got []string
	for _, message := range peeked {
		got = append(got, string(message.Body))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		return fmt.Errorf("%s holds %q, want %q", queue, got, want)
	}
	return nil
}

func (s *shim) expectSessionEmpty(queue, sessionID string) error {
	receiver, err := s.client.AcceptSessionForQueue(s.ctx, queue, sessionID, nil)
	if err != nil {
		return err
	}
	defer receiver.Close(s.ctx)
	peeked, err := receiver.PeekMessages(s.ctx, 10, nil)
	if err == nil && len(peeked) != 0 {
		err = fmt.Errorf("session %s still holds %s", sessionID, describe(peeked))
	}
	return err
}

func contains(text string) func(*shim, string) error {
	return func(_ *shim, output string) error {
		if !strings.Contains(output, text) {
			return fmt.Errorf("its output lacks %q", strings.TrimSpace(text))
		}
		return nil
	}
}

func all(checks ...func(*shim, string) error) func(*shim, string) error {
	return func(s *shim, output string) error {
		for _, check := range checks {
			if err := check(s, output); err != nil {
				return err
			}
		}
		return nil
	}
}

func notNil[T any](value *T, name string) error {
	if value == nil {
		return fmt.Errorf("%s is nil", name)
	}
	return nil
}

func describe(messages []*azservicebus.ReceivedMessage) string {
	var parts []string
	for _, message := range messages {
		parts = append(parts, fmt.Sprintf("%q(state %d, reason %q)", message.Body, message.State, value(message.DeadLetterReason)))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func ptr[T any](value T) *T { return &value }

func value(text *string) string {
	if text == nil {
		return ""
	}
	return *text
}
