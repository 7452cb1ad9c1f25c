// AMQP over TLS and over WebSockets with the unmodified azservicebus SDK, the way it connects to
// the cloud service: a connection string without UseDevelopmentEmulator (amqps), the
// development CA trusted through ClientOptions.TLSConfig, CustomEndpoint to reach another port,
// and ClientOptions.NewWebSocketConn (github.com/coder/websocket, as the SDK's own example) for
// wss to /$servicebus/websocket. Mirrors tests/python/test_sdk_transports.py and
// tests/js/transports.test.js. Both auth modes: with keys the SDK's CBS tokens (audience
// amqps://…) are checked over every transport.

package sdk_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/coder/websocket"

	"ferrobus/tests/go/harness"
)

// transportBroker is started once for the transport tests: TLS and WebSocket listeners on
// ephemeral ports, a data directory for the development CA.
var transportBroker struct {
	once          sync.Once
	broker        *harness.Broker
	tlsPort       int
	websocketPort int
	tlsConfig     *tls.Config
	err           error
}

const transportsConfig = "[tls]\nlisten = \"127.0.0.1:0\"\n[websocket]\nlisten = \"127.0.0.1:0\"\n"

var transportQueues = []string{"tls-q", "tls-main-port-q", "ws-q", "ws-main-port-q", "after-bad-client-q"}

// transports starts (once) and returns the transport broker; TestMain stops it.
func transports(t *testing.T) (*harness.Broker, int, int, *tls.Config) {
	t.Helper()
	transportBroker.once.Do(func() {
		config := transportsConfig
		for _, queue := range transportQueues {
			config += harness.QueueTOML(queue, nil)
		}
		config += harness.QueueTOML("ws-session-q", map[string]any{"requires_session": true})
		broker, err := harness.Start(config, harness.Options{Durable: true})
		if err != nil {
			transportBroker.err = err
			return
		}
		transportBroker.broker = broker
		if transportBroker.tlsPort, err = broker.TLSPort(); err != nil {
			transportBroker.err = err
			return
		}
		if transportBroker.websocketPort, err = broker.WebSocketPort(); err != nil {
			transportBroker.err = err
			return
		}
		transportBroker.tlsConfig, transportBroker.err = broker.TLSConfig()
	})
	if transportBroker.err != nil {
		t.Fatal(transportBroker.err)
	}
	t.Cleanup(func() { transportBroker.broker.ReportOnFailure(t) })
	return transportBroker.broker, transportBroker.tlsPort, transportBroker.websocketPort, transportBroker.tlsConfig
}

// stopTransportBroker stops the transport broker if it was started (TestMain, after the run).
func stopTransportBroker(failed bool) {
	broker := transportBroker.broker
	if broker == nil {
		return
	}
	broker.Stop()
	if !failed {
		broker.Remove()
	}
}

// cloudClient connects like a cloud client: amqps to host (which may carry a port).
func cloudClient(t *testing.T, host string, options *azservicebus.ClientOptions) *azservicebus.Client {
	t.Helper()
	return newClient(t, harness.CloudConnectionString(host), options)
}

// websocketDialer is the NewWebSocketConn of the SDK's example, trusting tlsConfig's CA.
func websocketDialer(tlsConfig *tls.Config, dialed *[]string) func(context.Context, azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	var mutex sync.Mutex
	return func(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
		mutex.Lock()
		*dialed = append(*dialed, args.Host)
		mutex.Unlock()
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = tlsConfig
		connection, _, err := websocket.Dial(ctx, args.Host, &websocket.DialOptions{
			Subprotocols: []string{"amqp"},
			HTTPClient:   &http.Client{Transport: transport},
		})
		if err != nil {
			return nil, err
		}
		// The connection outlives the dial's context.
		return websocket.NetConn(context.Background(), connection, websocket.MessageBinary), nil
	}
}

// roundTrip sends count messages, receives them peek-lock and completes them; the queue is
// empty afterwards.
func roundTrip(t *testing.T, client *azservicebus.Client, queue string, count int) {
	t.Helper()
	ctx := testContext(t)
	marker := uniqueID(queue)
	sender := newSender(t, client, queue)
	batch, err := sender.NewMessageBatch(ctx, nil)
	must(t, err, "NewMessageBatch")
	for index := 0; index < count; index++ {
		must(t, batch.AddMessage(message(fmt.Sprintf("%s-%d", marker, index), "x"), nil), "AddMessage")
	}
	must(t, sender.SendMessageBatch(ctx, batch, nil), "SendMessageBatch")
	receiver := newQueueReceiver(t, client, queue, nil)
	received := receiveExactly(t, receiver, count, 15*time.Second)
	for index, got := range received {
		if got.MessageID != fmt.Sprintf("%s-%d", marker, index) {
			t.Fatalf("received %v", messageIDs(received))
		}
		must(t, receiver.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
	assertNothingToPeek(t, ctx, receiver)
}

func TestSendReceiveAndSettleOverTLSOnTheAMQPSListener(t *testing.T) {
	// the cloud's connection string (no port) with CustomEndpoint naming the AMQPS listener,
	// like Python's custom_endpoint_address
	t.Parallel()
	_, tlsPort, _, tlsConfig := transports(t)
	client := cloudClient(t, "localhost", &azservicebus.ClientOptions{
		TLSConfig:      tlsConfig,
		CustomEndpoint: fmt.Sprintf("localhost:%d", tlsPort),
	})
	roundTrip(t, client, "tls-q", 5)
}

func TestTLSOnTheMainPortNamedInTheEndpoint(t *testing.T) {
	// A port in the Endpoint becomes part of go-amqp's TLS ServerName ("localhost:PORT", not a
	// host name: refused in the handshake), so a client that names the port there sets
	// ServerName itself.
	t.Parallel()
	broker, _, _, tlsConfig := transports(t)
	withServerName := tlsConfig.Clone()
	withServerName.ServerName = "localhost"
	client := cloudClient(t, fmt.Sprintf("localhost:%d", broker.Port), &azservicebus.ClientOptions{TLSConfig: withServerName})
	roundTrip(t, client, "tls-main-port-q", 3)
}

func TestWebSocketsCarrySessionsSchedulingAndManagement(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, _, websocketPort, tlsConfig := transports(t)
	var dialed []string
	client := cloudClient(t, fmt.Sprintf("localhost:%d", websocketPort), &azservicebus.ClientOptions{
		NewWebSocketConn: websocketDialer(tlsConfig, &dialed),
	})
	sender := newSender(t, client, "ws-session-q")
	for index := 0; index < 3; index++ {
		must(t, sender.SendMessage(ctx, &azservicebus.Message{MessageID: ptr(fmt.Sprintf("s%d", index)), SessionID: ptr("ws-a"), Body: []byte("s")}, nil), "SendMessage")
	}
	scheduled, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{MessageID: ptr("later"), SessionID: ptr("ws-a")}}, time.Now().Add(time.Hour), nil)
	must(t, err, "ScheduleMessages")
	session, err := client.AcceptNextSessionForQueue(ctx, "ws-session-q", nil)
	must(t, err, "AcceptNextSessionForQueue")
	if session.SessionID() != "ws-a" {
		t.Fatalf("session %q", session.SessionID())
	}
	must(t, session.SetSessionState(ctx, []byte("checkpoint-1"), nil), "SetSessionState")
	state, err := session.GetSessionState(ctx, nil)
	must(t, err, "GetSessionState")
	if string(state) != "checkpoint-1" {
		t.Fatalf("state %q", state)
	}
	peeked, err := session.PeekMessages(ctx, 10, nil)
	must(t, err, "PeekMessages")
	equalSlices(t, messageIDs(peeked), []string{"s0", "s1", "s2", "later"}, "peeked")
	received := receiveExactly(t, session, 3, 10*time.Second)
	equalSlices(t, messageIDs(received), []string{"s0", "s1", "s2"}, "received")
	for _, got := range received {
		must(t, session.CompleteMessage(ctx, got, nil), "CompleteMessage")
	}
	must(t, sender.CancelScheduledMessages(ctx, scheduled, nil), "CancelScheduledMessages")
	assertNothingToPeek(t, ctx, session)
	// A plain queue over the same connection.
	roundTrip(t, client, "ws-q", 4)
	if len(dialed) == 0 || dialed[0] != fmt.Sprintf("wss://localhost:%d/$servicebus/websocket", websocketPort) {
		t.Fatalf("the SDK dialled %v", dialed)
	}
}

func TestTheMainPortTakesTheWebSocketUpgradeToo(t *testing.T) {
	t.Parallel()
	broker, _, _, tlsConfig := transports(t)
	var dialed []string
	client := cloudClient(t, fmt.Sprintf("localhost:%d", broker.Port), &azservicebus.ClientOptions{
		NewWebSocketConn: websocketDialer(tlsConfig, &dialed),
	})
	roundTrip(t, client, "ws-main-port-q", 2)
}

func TestAnUntrustedCertificateFailsInTheClientAndTheBrokerServesOn(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	_, tlsPort, _, tlsConfig := transports(t)
	// A trust store the broker's certificate does not chain to.
	untrusted := &tls.Config{RootCAs: x509.NewCertPool()}
	client := cloudClient(t, "localhost", &azservicebus.ClientOptions{TLSConfig: untrusted, CustomEndpoint: fmt.Sprintf("localhost:%d", tlsPort)})
	err := newSender(t, client, "after-bad-client-q").SendMessage(ctx, message("never", "never"), nil)
	var unknownAuthority x509.UnknownAuthorityError
	if err == nil || (!errors.As(err, &unknownAuthority) && !strings.Contains(err.Error(), "certificate")) {
		t.Fatalf("an untrusted certificate: %v, want a certificate error", err)
	}
	trusted := cloudClient(t, "localhost", &azservicebus.ClientOptions{TLSConfig: tlsConfig, CustomEndpoint: fmt.Sprintf("localhost:%d", tlsPort)})
	roundTrip(t, trusted, "after-bad-client-q", 1)
}
