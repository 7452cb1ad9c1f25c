// Not from the SDK: ferrobus' shim around the SDK's admin examples
// (example_admin_client_test.go beside it, unmodified, see ../SOURCE.md); the same protocol as
// ../azservicebus/ferrobus_shim_test.go. The examples' adminClient is made from
// FERROBUS_CONNECTION_STRING with nil options, as a user's program would: it calls
// https://<host:port>/ and trusts the broker's development CA through SSL_CERT_FILE, which
// tests/go/samples/run sets.

package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

type sample struct {
	run     func()
	notRun  string
	does    string
	prepare func(*shim) error
	verify  func(s *shim, output string) error
}

var catalogue = map[string]sample{
	"ExampleNewClient": {run: ExampleNewClient,
		notRun: "needs a cloud identity: azidentity.NewDefaultAzureCredential and a *.servicebus.windows.net namespace"},
	"ExampleNewClientFromConnectionString": {run: ExampleNewClientFromConnectionString,
		notRun: `hard-codes the literal "<connection string>" (its parse error goes to the example's no-op exitOnError): nothing to point at a broker without changing it`},
	"ExampleClient_CreateQueue": {run: ExampleClient_CreateQueue,
		does:   `creates "queue-name" with the defaults and prints two of its properties`,
		verify: all(contains("Max message delivery count = 10\n"), contains("Lock duration: PT1M\n"), queueExists("queue-name"))},
	"ExampleClient_CreateQueue_usingproperties": {run: ExampleClient_CreateQueue_usingproperties,
		does:   `creates "queue-name" with LockDuration and MaxDeliveryCount`,
		verify: all(contains("Max message delivery count = 10\n"), contains("Lock duration: PT1M\n"), queueExists("queue-name"))},
	"ExampleClient_NewListQueuesPager": {run: ExampleClient_NewListQueuesPager,
		does:   "lists the queues with their maximum size",
		verify: all(contains("Queue name: exampleQueue, max size in MB: 1024\n"), contains("Queue name: myqueue, max size in MB: 1024\n"))},
	"ExampleClient_NewListQueuesRuntimePropertiesPager": {run: ExampleClient_NewListQueuesRuntimePropertiesPager,
		does: "lists the queues with their active message counts",
		prepare: func(s *shim) error {
			sender, err := s.client.NewSender("exampleQueue", nil)
			if err != nil {
				return err
			}
			defer sender.Close(s.ctx)
			for _, body := range []string{"one", "two"} {
				if err := sender.SendMessage(s.ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
					return err
				}
			}
			return nil
		},
		verify: all(contains("Queue name: exampleQueue, active messages: 2\n"), contains("Queue name: myqueue, active messages: 0\n"))},
}

func TestMain(m *testing.M) {
	name := os.Getenv("FERROBUS_SAMPLE")
	switch name {
	case "":
		os.Exit(m.Run())
	case "list":
		for name, entry := range catalogue {
			if entry.notRun != "" {
				fmt.Println(name + "\tnot-run\t" + entry.notRun)
			} else {
				fmt.Println(name + "\trun\t" + entry.does)
			}
		}
		os.Exit(0)
	}
	os.Exit(runSample(name))
}

type shim struct {
	ctx    context.Context
	client *azservicebus.Client
	admin  *admin.Client
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connectionString := os.Getenv("FERROBUS_CONNECTION_STRING")
	check, err := azservicebus.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return result(false, "shim: "+err.Error())
	}
	// The examples' client: the connection string, nil options, as in a user's program.
	adminClient, err = admin.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return result(false, "shim: "+err.Error())
	}
	// The shim's own admin client, for verifying.
	verifier, err := admin.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return result(false, "shim: "+err.Error())
	}
	s := &shim{ctx: ctx, client: check, admin: verifier}
	if entry.prepare != nil {
		if err := entry.prepare(s); err != nil {
			return result(false, "shim could not prepare: "+err.Error())
		}
	}

	realStdout := os.Stdout
	reader, writer, _ := os.Pipe()
	os.Stdout = writer
	var buffer bytes.Buffer
	var mutex sync.Mutex
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.MultiWriter(lockedWriter{&buffer, &mutex}, os.Stderr), reader)
		close(copied)
	}()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		entry.run()
	}()
	var recovered any
	select {
	case recovered = <-done:
	case <-ctx.Done():
		os.Stdout = realStdout
		return result(false, "did not return within 60 s")
	}
	os.Stdout = realStdout
	_ = writer.Close()
	<-copied
	if recovered != nil {
		return result(false, fmt.Sprintf("panicked: %v", recovered))
	}
	mutex.Lock()
	output := buffer.String()
	mutex.Unlock()
	if err := entry.verify(s, output); err != nil {
		return result(false, "returned, but "+err.Error())
	}
	return result(true, entry.does)
}

type lockedWriter struct {
	buffer *bytes.Buffer
	mutex  *sync.Mutex
}

func (w lockedWriter) Write(data []byte) (int, error) {
	w.mutex.Lock()
	defer w.mutex.Unlock()
	return w.buffer.Write(data)
}

func contains(text string) func(*shim, string) error {
	return func(_ *shim, output string) error {
		if !strings.Contains(output, text) {
			return fmt.Errorf("its output lacks %q", strings.TrimSpace(text))
		}
		return nil
	}
}

func queueExists(name string) func(*shim, string) error {
	return func(s *shim, _ string) error {
		queue, err := s.admin.GetQueue(s.ctx, name, nil)
		if err == nil && queue == nil {
			err = fmt.Errorf("queue %q does not exist", name)
		}
		return err
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
