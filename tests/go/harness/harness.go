// Package harness starts the real ferrobus binary for the Go SDK suite and hands out
// connection strings for the unmodified azservicebus SDK.
//
// It mirrors tests/python/conftest.py and tests/js/harness.js:
//   - The binary comes from FERROBUS_BIN, else <repo>/target/release/ferrobus.
//   - It is started with `--config FILE --listen 127.0.0.1:0`; the port is parsed from the
//     `listening on 127.0.0.1:PORT` line on stderr (10 s limit). stderr is drained for the whole
//     life of the process into a log file and a ring buffer whose tail is attached to every
//     failing test (see [Broker.ReportOnFailure]).
//   - Stopped with SIGTERM, SIGKILL after a grace period.
//
// Authorization mode: FERROBUS_TEST_AUTH=keys gives every broker started here (unless its config
// already has [[auth.keys]]) the connection strings' key, name RootManageSharedAccessKey with the
// Manage right, so the SDK's CBS tokens and the admin client's SAS tokens are checked. `none`
// (the default) starts brokers without keys: any token is accepted (emulator behaviour).
//
// Storage: FERROBUS_TEST_STORAGE=durable runs each broker on a data directory of its own (every
// reply after its fsync); the default is --memory. A broker given a data directory explicitly
// (TLS, WebSockets and the admin client need the development CA the broker writes there) is
// durable whatever the variable says.
package harness

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The key every connection string carries. Without [[auth.keys]] the broker accepts any token.
const (
	SASKeyName  = "RootManageSharedAccessKey"
	SASKeyValue = "SAS_KEY_VALUE"
)

const (
	startupTimeout  = 10 * time.Second
	shutdownTimeout = 5 * time.Second
	logTailLines    = 400
)

var (
	listeningPattern = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+)`)
	tlsPattern       = regexp.MustCompile(`AMQPS \(AMQP over TLS\) on 127\.0\.0\.1:(\d+)`)
	websocketPattern = regexp.MustCompile(`WebSockets \([^)]*\) on 127\.0\.0\.1:(\d+)`)
	ansiEscape       = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")
)

// AuthMode is FERROBUS_TEST_AUTH: "none" (default) or "keys".
func AuthMode() string {
	mode := os.Getenv("FERROBUS_TEST_AUTH")
	if mode == "" {
		return "none"
	}
	if mode != "none" && mode != "keys" {
		panic(fmt.Sprintf("FERROBUS_TEST_AUTH must be 'none' or 'keys', not %q", mode))
	}
	return mode
}

// KeysMode reports whether the brokers are started with the connection strings' key.
func KeysMode() bool { return AuthMode() == "keys" }

// SkipUnlessKeys skips a test of behaviour that only exists with keys configured.
func SkipUnlessKeys(t testing.TB) {
	t.Helper()
	if !KeysMode() {
		t.Skip("without keys any token is accepted; FERROBUS_TEST_AUTH=keys configures keys")
	}
}

// SkipUnlessNoKeys skips a test of the no-keys (emulator) behaviour.
func SkipUnlessNoKeys(t testing.TB) {
	t.Helper()
	if KeysMode() {
		t.Skip("tests the no-keys (emulator) behaviour; FERROBUS_TEST_AUTH=keys configures keys")
	}
}

// AuthKeyTOML is one [[auth.keys]] table.
func AuthKeyTOML(name, key string, rights ...string) string {
	quoted := make([]string, len(rights))
	for index, right := range rights {
		quoted[index] = strconv.Quote(right)
	}
	return fmt.Sprintf("[[auth.keys]]\nname = %s\nkey = %s\nrights = [%s]\n",
		strconv.Quote(name), strconv.Quote(key), strings.Join(quoted, ", "))
}

// WithTestAuth is the config a broker starts with: in keys mode the connection strings' key is
// added, unless the config configures keys itself.
func WithTestAuth(config string) string {
	if !KeysMode() || strings.Contains(config, "[[auth.keys]]") {
		return config
	}
	return config + "\n" + AuthKeyTOML(SASKeyName, SASKeyValue, "Manage")
}

// QueueDefaults are the per-queue settings; a test's queue overrides only what its rule needs.
var QueueDefaults = map[string]any{
	"lock_duration":                 "30s",
	"max_delivery_count":            10,
	"max_size_in_megabytes":         64,
	"max_message_size_in_kilobytes": 256,
}

func tomlValue(value any) string {
	switch typed := value.(type) {
	case string:
		return strconv.Quote(typed)
	case bool:
		return strconv.FormatBool(typed)
	default:
		return fmt.Sprint(typed)
	}
}

// settingsLines writes key = value lines in key order (stable configs, readable diffs).
func settingsLines(settings map[string]any) []string {
	keys := make([]string, 0, len(settings))
	for key := range settings {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	lines := make([]string, 0, len(keys))
	for _, key := range keys {
		lines = append(lines, fmt.Sprintf("%s = %s", key, tomlValue(settings[key])))
	}
	return lines
}

// QueueTOML is a [[queues]] table: QueueDefaults overridden by overrides.
func QueueTOML(name string, overrides map[string]any) string {
	settings := map[string]any{}
	for key, value := range QueueDefaults {
		settings[key] = value
	}
	for key, value := range overrides {
		settings[key] = value
	}
	lines := append([]string{"[[queues]]", "name = " + strconv.Quote(name)}, settingsLines(settings)...)
	return strings.Join(lines, "\n") + "\n"
}

// QueuesTOML is one [[queues]] table per entry.
func QueuesTOML(queues map[string]map[string]any) string {
	names := make([]string, 0, len(queues))
	for name := range queues {
		names = append(names, name)
	}
	sort.Strings(names)
	var builder strings.Builder
	for _, name := range names {
		builder.WriteString(QueueTOML(name, queues[name]))
	}
	return builder.String()
}

// TopicTOML is a [[topics]] table with one [[topics.subscriptions]] per subscription, each with
// subscriptionSettings.
func TopicTOML(name string, subscriptions []string, subscriptionSettings map[string]any) string {
	lines := []string{"[[topics]]", "name = " + strconv.Quote(name)}
	for _, subscription := range subscriptions {
		lines = append(lines, "[[topics.subscriptions]]", "name = "+strconv.Quote(subscription))
		lines = append(lines, settingsLines(subscriptionSettings)...)
	}
	return strings.Join(lines, "\n") + "\n"
}

// ConnectionString is the emulator's shape of connection string (plain AMQP on port).
func ConnectionString(port int, keyName, key string) string {
	return fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true",
		port, keyName, key)
}

// CloudConnectionString is the cloud's shape (no emulator flag: TLS, or WebSockets) for host,
// which may carry a port.
func CloudConnectionString(host string) string {
	return fmt.Sprintf("Endpoint=sb://%s/;SharedAccessKeyName=%s;SharedAccessKey=%s", host, SASKeyName, SASKeyValue)
}

// BrokerBinary is FERROBUS_BIN, else <repo>/target/release/ferrobus.
func BrokerBinary() string {
	if binary := os.Getenv("FERROBUS_BIN"); binary != "" {
		return binary
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "target", "release", "ferrobus")
}

// Options of one broker.
type Options struct {
	// DataDir: a data directory of the caller's own (durable whatever FERROBUS_TEST_STORAGE
	// says); the development CA is written to DataDir/dev-ca.pem.
	DataDir string
	// Durable: a data directory under the work directory (for the CA), whatever
	// FERROBUS_TEST_STORAGE says.
	Durable bool
}

// Broker is one ferrobus process with its own config file and log file.
type Broker struct {
	// Port is the AMQP port (it also serves HTTP(S), TLS and WebSocket upgrades).
	Port int
	// WorkDir holds the config, the log and (unless DataDir was given) the data directory.
	WorkDir string
	// DataDir is the data directory, empty with --memory.
	DataDir    string
	ConfigPath string
	LogPath    string

	process  *exec.Cmd
	exited   chan struct{}
	exitCode int
	// mu guards tail (the reader goroutine appends while tests read).
	mu   sync.Mutex
	tail []string
	// readerDone closes when stderr reached EOF (so the log file is complete).
	readerDone chan struct{}
	ownWorkDir bool
}

// Start starts a broker from config (TOML text) and waits for its listening line.
func Start(config string, options Options) (*Broker, error) {
	binary := BrokerBinary()
	if info, err := os.Stat(binary); err != nil || info.IsDir() {
		return nil, fmt.Errorf("ferrobus binary not found at %s: build it with `cargo build --release` or point FERROBUS_BIN at it", binary)
	}
	workDir, err := os.MkdirTemp("", "ferrobus-go-")
	if err != nil {
		return nil, err
	}
	broker := &Broker{
		WorkDir:    workDir,
		ConfigPath: filepath.Join(workDir, "ferrobus.toml"),
		LogPath:    filepath.Join(workDir, "ferrobus.stderr.log"),
		exited:     make(chan struct{}),
		readerDone: make(chan struct{}),
		ownWorkDir: true,
	}
	if err := os.WriteFile(broker.ConfigPath, []byte(WithTestAuth(config)), 0o600); err != nil {
		return nil, err
	}
	storage := []string{"--memory"}
	switch {
	case options.DataDir != "":
		broker.DataDir = options.DataDir
	case options.Durable || os.Getenv("FERROBUS_TEST_STORAGE") == "durable":
		broker.DataDir = filepath.Join(workDir, "data")
	}
	if broker.DataDir != "" {
		storage = []string{"--data-dir", broker.DataDir}
	}
	arguments := append([]string{"--config", broker.ConfigPath, "--listen", "127.0.0.1:0"}, storage...)
	process := exec.Command(binary, arguments...)
	process.Env = append(os.Environ(), "NO_COLOR=1")
	stderr, err := process.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := process.Start(); err != nil {
		return nil, err
	}
	broker.process = process
	logFile, err := os.Create(broker.LogPath)
	if err != nil {
		_ = process.Process.Kill()
		return nil, err
	}
	port := make(chan int, 1)
	go broker.drain(stderr, logFile, port)
	go func() {
		<-broker.readerDone
		_ = process.Wait()
		broker.exitCode = process.ProcessState.ExitCode()
		close(broker.exited)
	}()
	select {
	case broker.Port = <-port:
		return broker, nil
	case <-broker.exited:
		return nil, fmt.Errorf("ferrobus exited with %d before listening:\n%s", broker.exitCode, broker.LogTail(80))
	case <-time.After(startupTimeout):
		broker.Stop()
		return nil, fmt.Errorf("ferrobus printed no 'listening on 127.0.0.1:PORT' within %s:\n%s", startupTimeout, broker.LogTail(80))
	}
}

// drain copies stderr into the log file and the ring buffer for the whole life of the process
// (so the pipe never fills) and reports the port once.
func (b *Broker) drain(stderr io.Reader, logFile *os.File, port chan<- int) {
	defer close(b.readerDone)
	defer logFile.Close()
	scanner := bufio.NewScanner(stderr)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	found := false
	for scanner.Scan() {
		line := ansiEscape.ReplaceAllString(scanner.Text(), "")
		_, _ = logFile.WriteString(line + "\n")
		b.mu.Lock()
		b.tail = append(b.tail, line)
		if len(b.tail) > logTailLines {
			b.tail = b.tail[len(b.tail)-logTailLines:]
		}
		b.mu.Unlock()
		if !found {
			if match := listeningPattern.FindStringSubmatch(line); match != nil {
				value, _ := strconv.Atoi(match[1])
				found = true
				port <- value
			}
		}
	}
}

// StartForTest starts a broker for one test and stops it when the test ends; a failing test's
// output carries the broker's log tail.
func StartForTest(t testing.TB, config string, options Options) *Broker {
	t.Helper()
	broker, err := Start(config, options)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		broker.ReportOnFailure(t)
		broker.Stop()
		broker.Remove()
	})
	return broker
}

// ReportOnFailure logs the broker's stderr tail if t failed.
func (b *Broker) ReportOnFailure(t testing.TB) {
	if t.Failed() {
		t.Logf("--- ferrobus stderr tail (port %d, full log %s) ---\n%s", b.Port, b.LogPath, b.LogTail(60))
	}
}

// LogTail is the last lines of the broker's stderr.
func (b *Broker) LogTail(lines int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := len(b.tail) - lines
	if start < 0 {
		start = 0
	}
	text := strings.Join(b.tail[start:], "\n")
	select {
	case <-b.exited:
		text += "\n[broker process has exited]"
	default:
	}
	return text
}

// Running reports whether the process is alive.
func (b *Broker) Running() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (kill -9): no shutdown, no flush.
func (b *Broker) Kill() {
	if b.process == nil {
		return
	}
	select {
	case <-b.exited:
	default:
		_ = b.process.Process.Kill()
		<-b.exited
	}
}

// Stop sends SIGTERM, then SIGKILL after a grace period; returns the exit code.
func (b *Broker) Stop() int {
	if b.process == nil {
		return -1
	}
	select {
	case <-b.exited:
		return b.exitCode
	default:
	}
	_ = b.process.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(shutdownTimeout):
		_ = b.process.Process.Kill()
		<-b.exited
	}
	return b.exitCode
}

// Remove deletes the work directory (config, log, data) unless FERROBUS_KEEP_TEST_DIRS is set.
func (b *Broker) Remove() {
	if os.Getenv("FERROBUS_KEEP_TEST_DIRS") != "" || !b.ownWorkDir {
		return
	}
	_ = os.RemoveAll(b.WorkDir)
}

// ConnectionString is the emulator connection string with the suite's key.
func (b *Broker) ConnectionString() string {
	return ConnectionString(b.Port, SASKeyName, SASKeyValue)
}

// ConnectionStringWith carries another key name and key.
func (b *Broker) ConnectionStringWith(keyName, key string) string {
	return ConnectionString(b.Port, keyName, key)
}

// WaitForLogLine waits until a line of the log matches pattern; returns its first group.
func (b *Broker) WaitForLogLine(pattern *regexp.Regexp, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		if match := pattern.FindStringSubmatch(b.LogTail(logTailLines)); match != nil {
			if len(match) > 1 {
				return match[1], nil
			}
			return match[0], nil
		}
		if time.Now().After(deadline) || !b.Running() {
			return "", fmt.Errorf("no log line %q:\n%s", pattern, b.LogTail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *Broker) portFromLog(pattern *regexp.Regexp) (int, error) {
	text, err := b.WaitForLogLine(pattern, startupTimeout)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(text)
}

// TLSPort is the AMQPS listener's port (config `[tls] listen = "127.0.0.1:0"`).
func (b *Broker) TLSPort() (int, error) { return b.portFromLog(tlsPattern) }

// WebSocketPort is the WebSocket listener's port (config `[websocket] listen = "127.0.0.1:0"`).
func (b *Broker) WebSocketPort() (int, error) { return b.portFromLog(websocketPattern) }

// CAPath is the development CA the broker writes into its data directory.
func (b *Broker) CAPath() string { return filepath.Join(b.DataDir, "dev-ca.pem") }

// CertPool reads the development CA (waiting for the broker to write it).
func (b *Broker) CertPool() (*x509.CertPool, error) {
	if b.DataDir == "" {
		return nil, errors.New("a broker started with --memory writes no development CA; give it a data directory")
	}
	deadline := time.Now().Add(startupTimeout)
	for {
		pem, err := os.ReadFile(b.CAPath())
		if err == nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate in %s", b.CAPath())
			}
			return pool, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no development CA at %s: %w", b.CAPath(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TLSConfig trusts the development CA (and nothing else).
func (b *Broker) TLSConfig() (*tls.Config, error) {
	pool, err := b.CertPool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
