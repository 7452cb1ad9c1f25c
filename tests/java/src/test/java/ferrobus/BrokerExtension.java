package ferrobus;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;

/**
 * One broker per test class: {@code @RegisterExtension static final BrokerExtension BROKER = new
 * BrokerExtension(config)} starts it before the class's first test and stops it after the last.
 * A failing test's error carries the broker's stderr tail. The broker's directory (config, log,
 * data) is removed afterwards unless a test failed or FERROBUS_KEEP_TEST_DIRS is set.
 */
public final class BrokerExtension implements BeforeAllCallback, AfterAllCallback, TestExecutionExceptionHandler {
    private final Broker broker;
    private volatile boolean failed;

    public BrokerExtension(String configText) {
        this(new Broker(configText));
    }

    public BrokerExtension(Broker broker) {
        this.broker = broker;
    }

    public Broker broker() {
        return broker;
    }

    public String connectionString() {
        return broker.connectionString();
    }

    @Override
    public void beforeAll(ExtensionContext context) throws Exception {
        broker.start();
    }

    @Override
    public void afterAll(ExtensionContext context) throws Exception {
        broker.stop();
        if (!failed && System.getenv("FERROBUS_KEEP_TEST_DIRS") == null) {
            deleteTree(broker.workDir());
        }
    }

    @Override
    public void handleTestExecutionException(ExtensionContext context, Throwable throwable) throws Throwable {
        failed = true;
        AssertionError withLog = new AssertionError(throwable + "\n--- ferrobus stderr tail (port "
                + safePort() + ", full log " + broker.logPath() + ") ---\n" + broker.logTail(40), throwable);
        throw withLog;
    }

    private String safePort() {
        try {
            return String.valueOf(broker.port());
        } catch (IllegalStateException notStarted) {
            return "none";
        }
    }

    static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(root)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(path);
            }
        }
    }
}
