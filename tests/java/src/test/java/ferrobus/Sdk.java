package ferrobus;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.azure.core.amqp.AmqpRetryMode;
import com.azure.core.amqp.exception.AmqpErrorCondition;
import com.azure.core.amqp.exception.AmqpException;
import com.azure.core.amqp.AmqpRetryOptions;
import com.azure.core.http.HttpPipelinePosition;
import com.azure.core.http.netty.NettyAsyncHttpClientBuilder;
import com.azure.core.http.policy.FixedDelayOptions;
import com.azure.core.http.policy.HttpPipelinePolicy;
import com.azure.core.http.policy.RetryOptions;
import com.azure.core.util.UrlBuilder;
import com.azure.messaging.servicebus.ServiceBusClientBuilder;
import com.azure.messaging.servicebus.ServiceBusException;
import com.azure.messaging.servicebus.ServiceBusFailureReason;
import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClient;
import com.azure.messaging.servicebus.administration.ServiceBusAdministrationClientBuilder;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.IOException;
import java.io.InputStream;
import java.net.MalformedURLException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.Supplier;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import reactor.core.publisher.Mono;

/** SDK helpers shared by the test classes. */
public final class Sdk {
    private Sdk() {
    }

    /** How long a test waits to conclude that nothing (more) will be delivered. */
    public static final Duration ABSENCE_WAIT = Duration.ofMillis(1500);

    /**
     * Retry options of every test client: no retries (a retried operation that succeeds on its
     * second attempt would hide a broker failure on the first) and a 20 s try timeout instead of
     * the SDK's 60 s, so a broker reply that never comes fails well inside the test's timeout.
     */
    public static AmqpRetryOptions noRetries() {
        return new AmqpRetryOptions().setMaxRetries(0).setMode(AmqpRetryMode.FIXED)
                .setDelay(Duration.ofMillis(100)).setTryTimeout(Duration.ofSeconds(20));
    }

    public static ServiceBusClientBuilder builder(String connectionString) {
        return new ServiceBusClientBuilder().connectionString(connectionString).retryOptions(noRetries());
    }

    public static String uniqueId(String prefix) {
        return prefix + "-" + UUID.randomUUID();
    }

    /** Receives until {@code count} messages arrived; fails if they don't within {@code timeout}. */
    public static List<ServiceBusReceivedMessage> receiveExactly(ServiceBusReceiverClient receiver, int count,
            Duration timeout) {
        List<ServiceBusReceivedMessage> received = new ArrayList<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (received.size() < count) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                break;
            }
            receiver.receiveMessages(count - received.size(), Duration.ofNanos(left)).forEach(received::add);
        }
        assertEquals(count, received.size(),
                "expected " + count + " messages, received " + received.size() + " within " + timeout);
        return received;
    }

    public static List<ServiceBusReceivedMessage> receiveExactly(ServiceBusReceiverClient receiver, int count) {
        return receiveExactly(receiver, count, Duration.ofSeconds(10));
    }

    public static void assertNothingToReceive(ServiceBusReceiverClient receiver) {
        List<String> unexpected = new ArrayList<>();
        receiver.receiveMessages(10, ABSENCE_WAIT)
                .forEach(message -> unexpected.add(message.getMessageId() + "#" + message.getSequenceNumber()));
        assertEquals(List.of(), unexpected, "expected no message to be receivable");
    }

    public static List<String> bodies(Iterable<ServiceBusReceivedMessage> messages) {
        List<String> bodies = new ArrayList<>();
        messages.forEach(message -> bodies.add(message.getBody().toString()));
        return bodies;
    }

    /** Runs {@code operation}, asserting it fails with a ServiceBusException of {@code reason}. */
    public static ServiceBusException assertServiceBusError(ServiceBusFailureReason reason, Runnable operation) {
        Throwable caught = null;
        try {
            operation.run();
        } catch (Throwable error) {
            caught = error;
        }
        if (caught == null) {
            fail("expected a ServiceBusException with reason " + reason + ", but the operation succeeded");
        }
        ServiceBusException found = find(caught, ServiceBusException.class);
        if (found == null) {
            throw new AssertionError("expected a ServiceBusException with reason " + reason + ", got " + caught,
                    caught);
        }
        assertEquals(reason, found.getReason(), "wrong failure reason; message: " + found.getMessage());
        return found;
    }

    /**
     * Runs {@code operation}, asserting it fails with {@code reason}: as a ServiceBusException
     * of that reason, or as the AmqpException of {@code condition} that the Java SDK surfaces
     * for a refused link (a session that cannot be locked, a receiver without Listen).
     */
    public static void assertRefused(ServiceBusFailureReason reason, AmqpErrorCondition condition,
            Runnable operation) {
        Throwable caught = null;
        try {
            operation.run();
        } catch (Throwable error) {
            caught = error;
        }
        if (caught == null) {
            fail("expected a refusal (" + reason + " / " + condition + "), but the operation succeeded");
        }
        ServiceBusException serviceBus = find(caught, ServiceBusException.class);
        if (serviceBus != null && serviceBus.getReason() == reason) {
            return;
        }
        AmqpException amqp = find(caught, AmqpException.class);
        if (amqp == null || amqp.getErrorCondition() != condition) {
            throw new AssertionError("expected " + reason + " / " + condition + ", got " + caught, caught);
        }
    }

    public static void assertSessionCannotBeLocked(Runnable accept) {
        assertRefused(ServiceBusFailureReason.SESSION_CANNOT_BE_LOCKED, AmqpErrorCondition.SESSION_CANNOT_BE_LOCKED,
                accept);
    }

    /** The first cause of {@code error} (itself included) of {@code type}. */
    public static <T extends Throwable> T find(Throwable error, Class<T> type) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (type.isInstance(cause)) {
                return type.cast(cause);
            }
            if (cause.getCause() == cause) {
                break;
            }
        }
        return null;
    }

    public static void assertNearNow(OffsetDateTime time, Duration tolerance, String what) {
        assertTrue(time != null, what + " is missing");
        long skew = Math.abs(Duration.between(time, OffsetDateTime.now()).toMillis());
        assertTrue(skew < tolerance.toMillis(), what + " " + time + " is " + skew + " ms away from now");
    }

    /** Polls {@code condition} every 50 ms until it holds; fails after {@code timeout}. */
    public static void eventually(Duration timeout, String what, Supplier<Boolean> condition)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.get()) {
            if (System.nanoTime() > deadline) {
                fail(what + " did not happen within " + timeout);
            }
            Thread.sleep(50);
        }
    }

    // -------------------------------------------------------------------------------------------
    // TLS: the broker's development CA (<data_dir>/dev-ca.pem), trusted through a trust store
    // built here from the PEM.

    /** Waits for the broker to write its development CA and returns its path. */
    public static Path developmentCa(Broker broker) throws InterruptedException {
        Path dataDir = broker.dataDir();
        if (dataDir == null) {
            throw new IllegalStateException("the development CA lives in a data directory; start the broker with one");
        }
        Path ca = dataDir.resolve("dev-ca.pem");
        eventually(Duration.ofSeconds(10), "the development CA at " + ca, () -> Files.isRegularFile(ca));
        return ca;
    }

    public static TrustManagerFactory trustManagers(Path caPem) throws IOException, GeneralSecurityException {
        KeyStore store = KeyStore.getInstance("PKCS12");
        store.load(null, null);
        try (InputStream pem = Files.newInputStream(caPem)) {
            int index = 0;
            for (Certificate certificate : CertificateFactory.getInstance("X.509").generateCertificates(pem)) {
                store.setCertificateEntry("ferrobus-dev-ca-" + index++, certificate);
            }
        }
        TrustManagerFactory factory = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        factory.init(store);
        return factory;
    }

    /**
     * Makes the JVM's default SSLContext trust {@code caPem}: the SDK's AMQP connections over TLS
     * and WebSockets take {@code SSLContext.getDefault()} at each connection (as a user's
     * {@code -Djavax.net.ssl.trustStore} would feed it).
     */
    public static void trustForAmqp(Path caPem) throws IOException, GeneralSecurityException {
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, trustManagers(caPem).getTrustManagers(), null);
        SSLContext.setDefault(context);
    }

    /**
     * The administration client for the broker's AMQP port: the Java client always calls
     * {@code https://<host of the Endpoint>} (it drops the port), so a pipeline policy puts the
     * broker's port back, and its HTTP client trusts the development CA.
     */
    public static ServiceBusAdministrationClient adminClient(String connectionString, int port, Path caPem)
            throws IOException, GeneralSecurityException {
        SslContext ssl = SslContextBuilder.forClient().trustManager(trustManagers(caPem)).build();
        reactor.netty.http.client.HttpClient netty =
                reactor.netty.http.client.HttpClient.create().secure(spec -> spec.sslContext(ssl));
        return new ServiceBusAdministrationClientBuilder()
                .connectionString(connectionString)
                .httpClient(new NettyAsyncHttpClientBuilder(netty).build())
                .addPolicy(portPolicy(port))
                .retryOptions(new RetryOptions(new FixedDelayOptions(0, Duration.ofMillis(100))))
                .buildClient();
    }

    /** Sends every request to {@code port} on the same host. */
    public static HttpPipelinePolicy portPolicy(int port) {
        return new HttpPipelinePolicy() {
            @Override
            public Mono<com.azure.core.http.HttpResponse> process(com.azure.core.http.HttpPipelineCallContext context,
                    com.azure.core.http.HttpPipelineNextPolicy next) {
                try {
                    UrlBuilder url = UrlBuilder.parse(context.getHttpRequest().getUrl());
                    url.setPort(port);
                    context.getHttpRequest().setUrl(url.toUrl());
                } catch (MalformedURLException error) {
                    return Mono.error(error);
                }
                return next.process();
            }

            @Override
            public HttpPipelinePosition getPipelinePosition() {
                return HttpPipelinePosition.PER_RETRY;
            }
        };
    }
}
