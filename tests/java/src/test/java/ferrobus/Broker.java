package ferrobus;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One ferrobus process with its own config file and log file, started on 127.0.0.1:0.
 *
 * <p>Mirrors tests/python/conftest.py and tests/js/harness.js: the binary comes from
 * {@code FERROBUS_BIN}, else {@code <repo>/target/release/ferrobus}; it is started with
 * {@code --config FILE --listen 127.0.0.1:0} and the port is read from the
 * {@code listening on 127.0.0.1:PORT} line on stderr (10 s limit). stderr is drained for the
 * whole life of the process into a log file and a ring buffer whose tail is attached to every
 * failing test (see {@link BrokerExtension}). Stopped with SIGTERM, SIGKILL after a grace period.
 *
 * <p>Authorization mode: {@code FERROBUS_TEST_AUTH=keys} gives every broker started here (unless
 * its config already has {@code [[auth.keys]]}) the connection strings' key,
 * {@code RootManageSharedAccessKey} with the Manage right, so the SDK's CBS tokens are checked on
 * every link and {@code $management} operation; {@code none} (the default) starts brokers without
 * keys, where any token is accepted (emulator behaviour). Storage: {@code
 * FERROBUS_TEST_STORAGE=durable} runs each broker on a data directory of its own, the default is
 * {@code --memory}; {@link #durable} brokers always have one.
 */
public final class Broker {
    public static final String SAS_KEY_NAME = "RootManageSharedAccessKey";
    public static final String SAS_KEY_VALUE = "SAS_KEY_VALUE";
    public static final String AUTH_MODE = envOr("FERROBUS_TEST_AUTH", "none");
    public static final boolean KEYS_MODE;
    public static final boolean DURABLE_STORAGE = "durable".equals(envOr("FERROBUS_TEST_STORAGE", "memory"));

    static {
        if (!AUTH_MODE.equals("none") && !AUTH_MODE.equals("keys")) {
            throw new IllegalStateException("FERROBUS_TEST_AUTH must be 'none' or 'keys', not '" + AUTH_MODE + "'");
        }
        KEYS_MODE = AUTH_MODE.equals("keys");
    }

    private static final Duration STARTUP_TIMEOUT = Duration.ofSeconds(10);
    private static final Duration SHUTDOWN_TIMEOUT = Duration.ofSeconds(5);
    private static final Pattern LISTENING = Pattern.compile("listening on 127\\.0\\.0\\.1:(\\d+)");
    private static final Pattern TLS_LISTENING = Pattern.compile("AMQPS \\(AMQP over TLS\\) on 127\\.0\\.0\\.1:(\\d+)");
    private static final Pattern WEBSOCKET_LISTENING =
            Pattern.compile("WebSockets \\([^)]*\\) on 127\\.0\\.0\\.1:(\\d+)");
    private static final Pattern ANSI_ESCAPE = Pattern.compile("\u001b\\[[0-9;]*[A-Za-z]");
    private static final int LOG_TAIL_LINES = 400;

    private final String configText;
    /** Stores in {@code <workDir>/data} whatever FERROBUS_TEST_STORAGE says (the development CA lives there). */
    private final boolean durable;
    private final Path workDir;
    private final Path logPath;
    private final Deque<String> tail = new ArrayDeque<>();
    private Process process;
    private Thread reader;
    private volatile int port;

    private Broker(String configText, boolean durable) {
        this.configText = withTestAuth(configText);
        try {
            this.workDir = Files.createTempDirectory("ferrobus-java-");
        } catch (IOException error) {
            throw new UncheckedIOException(error);
        }
        this.durable = durable;
        this.logPath = workDir.resolve("ferrobus.stderr.log");
    }

    /** A broker on {@code configText}, storing as FERROBUS_TEST_STORAGE says. */
    public Broker(String configText) {
        this(configText, false);
    }

    /** A broker with a data directory of its own, whatever FERROBUS_TEST_STORAGE says. */
    public static Broker durable(String configText) {
        return new Broker(configText, true);
    }

    private static String envOr(String name, String fallback) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? fallback : value;
    }

    /** The config a broker starts with: in keys mode the connection strings' key is added. */
    static String withTestAuth(String configText) {
        if (!KEYS_MODE || configText.contains("[[auth.keys]]")) {
            return configText;
        }
        return configText + "\n" + Config.authKey(SAS_KEY_NAME, SAS_KEY_VALUE, "Manage");
    }

    public static Path binary() {
        String configured = System.getenv("FERROBUS_BIN");
        if (configured != null && !configured.isEmpty()) {
            return Path.of(configured);
        }
        Path base = Path.of(System.getProperty("basedir", System.getProperty("user.dir")));
        return base.resolve("../../target/release/ferrobus").normalize();
    }

    public Path workDir() {
        return workDir;
    }

    /** The data directory the broker stores in (and writes its development CA to), if any. */
    public Path dataDir() {
        return durable || DURABLE_STORAGE ? workDir.resolve("data") : null;
    }

    public synchronized Broker start() throws IOException, InterruptedException {
        Path binary = binary();
        if (!Files.isRegularFile(binary)) {
            throw new IllegalStateException("ferrobus binary not found at " + binary
                    + ": build it with `cargo build --release` or point FERROBUS_BIN at it");
        }
        Path configPath = workDir.resolve("ferrobus.toml");
        Files.writeString(configPath, configText);
        List<String> command = new ArrayList<>(List.of(
                binary.toString(), "--config", configPath.toString(), "--listen", "127.0.0.1:0"));
        Path storage = dataDir();
        if (storage != null) {
            command.add("--data-dir");
            command.add(storage.toString());
        } else {
            command.add("--memory");
        }
        ProcessBuilder builder = new ProcessBuilder(command)
                .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")))
                .redirectOutput(ProcessBuilder.Redirect.DISCARD);
        builder.environment().put("NO_COLOR", "1");
        process = builder.start();
        reader = new Thread(this::drainStderr, "ferrobus-stderr");
        reader.setDaemon(true);
        reader.start();
        long deadline = System.nanoTime() + STARTUP_TIMEOUT.toNanos();
        synchronized (tail) {
            while (port == 0) {
                if (!process.isAlive()) {
                    reader.join(1000);
                    throw new IllegalStateException("ferrobus exited with " + process.exitValue()
                            + " before listening:\n" + logTail(80));
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    stop();
                    throw new IllegalStateException("ferrobus printed no 'listening on 127.0.0.1:PORT' within "
                            + STARTUP_TIMEOUT.toSeconds() + " s:\n" + logTail(80));
                }
                tail.wait(Math.max(1, Math.min(50, TimeUnit.NANOSECONDS.toMillis(left))));
            }
        }
        return this;
    }

    private void drainStderr() {
        try (BufferedReader lines = new BufferedReader(new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8));
                Writer log = Files.newBufferedWriter(logPath, StandardCharsets.UTF_8)) {
            String raw;
            while ((raw = lines.readLine()) != null) {
                String line = ANSI_ESCAPE.matcher(raw).replaceAll("");
                log.write(line);
                log.write('\n');
                log.flush();
                synchronized (tail) {
                    tail.addLast(line);
                    if (tail.size() > LOG_TAIL_LINES) {
                        tail.removeFirst();
                    }
                    if (port == 0) {
                        Matcher match = LISTENING.matcher(line);
                        if (match.find()) {
                            port = Integer.parseInt(match.group(1));
                        }
                    }
                    tail.notifyAll();
                }
            }
        } catch (IOException error) {
            synchronized (tail) {
                tail.addLast("[reading the broker's stderr failed: " + error + "]");
                tail.notifyAll();
            }
        }
    }

    public int port() {
        if (port == 0) {
            throw new IllegalStateException("broker not started");
        }
        return port;
    }

    /** The AMQPS listener's port (the config must have {@code [tls] listen = "127.0.0.1:0"}). */
    public int tlsPort() throws InterruptedException {
        return portFromLog(TLS_LISTENING);
    }

    /** The WebSocket listener's port (the config must have {@code [websocket] listen}). */
    public int webSocketPort() throws InterruptedException {
        return portFromLog(WEBSOCKET_LISTENING);
    }

    private int portFromLog(Pattern pattern) throws InterruptedException {
        long deadline = System.nanoTime() + STARTUP_TIMEOUT.toNanos();
        synchronized (tail) {
            while (true) {
                for (String line : tail) {
                    Matcher match = pattern.matcher(line);
                    if (match.find()) {
                        return Integer.parseInt(match.group(1));
                    }
                }
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("no listener line " + pattern.pattern() + " in:\n" + logTail(40));
                }
                tail.wait(50);
            }
        }
    }

    /** The emulator-style connection string: plain AMQP on the broker's port. */
    public String connectionString() {
        return connectionString(SAS_KEY_NAME, SAS_KEY_VALUE);
    }

    public String connectionString(String keyName, String key) {
        return String.format(Locale.ROOT,
                "Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true",
                port(), keyName, key);
    }

    /**
     * The cloud's shape of connection string (no emulator flag: TLS, or wss with
     * AMQP_WEB_SOCKETS) naming {@code localhost:port}, which the development certificate covers.
     */
    public static String cloudConnectionString(int port) {
        return String.format(Locale.ROOT,
                "Endpoint=sb://localhost:%d/;SharedAccessKeyName=%s;SharedAccessKey=%s", port, SAS_KEY_NAME,
                SAS_KEY_VALUE);
    }

    public String logTail(int lines) {
        synchronized (tail) {
            List<String> all = new ArrayList<>(tail);
            String text = String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
            return isRunning() ? text : text + "\n[broker process has exited]";
        }
    }

    public Path logPath() {
        return logPath;
    }

    public boolean isRunning() {
        return process != null && process.isAlive();
    }

    /** SIGTERM, then SIGKILL after the grace period. Returns the exit code (-1 if never started). */
    public synchronized int stop() throws InterruptedException {
        if (process == null) {
            return -1;
        }
        if (process.isAlive()) {
            process.destroy();
            if (!process.waitFor(SHUTDOWN_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly();
                process.waitFor(SHUTDOWN_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
        if (reader != null) {
            reader.join(2000);
        }
        return process.exitValue();
    }
}
