package ferrobus;

import java.util.LinkedHashMap;
import java.util.Map;

/** TOML builders for broker configs, with the same per-queue defaults as the Python and JS suites. */
public final class Config {
    private Config() {
    }

    /** Per-queue defaults; a test's queue overrides only what its rule needs. */
    private static final Map<String, Object> QUEUE_DEFAULTS = Map.of(
            "lock_duration", "30s",
            "max_delivery_count", 10,
            "max_size_in_megabytes", 64,
            "max_message_size_in_kilobytes", 256);

    static String value(Object value) {
        if (value instanceof String text) {
            return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        }
        return String.valueOf(value);
    }

    /** {@code [[queues]]} for {@code name}; {@code overrides} are key, value pairs. */
    public static String queue(String name, Object... overrides) {
        Map<String, Object> settings = new LinkedHashMap<>(QUEUE_DEFAULTS);
        settings.putAll(pairs(overrides));
        StringBuilder toml = new StringBuilder("[[queues]]\nname = ").append(value(name)).append('\n');
        settings.forEach((key, setting) -> toml.append(key).append(" = ").append(value(setting)).append('\n'));
        return toml.toString();
    }

    /** {@code [[topics]]} with one {@code [[topics.subscriptions]]} per name (each with {@code subscriptionOverrides}). */
    public static String topic(String name, String[] subscriptions, Object... subscriptionOverrides) {
        StringBuilder toml = new StringBuilder("[[topics]]\nname = ").append(value(name)).append('\n');
        Map<String, Object> overrides = pairs(subscriptionOverrides);
        for (String subscription : subscriptions) {
            toml.append("[[topics.subscriptions]]\nname = ").append(value(subscription)).append('\n');
            overrides.forEach((key, setting) -> toml.append(key).append(" = ").append(value(setting)).append('\n'));
        }
        return toml.toString();
    }

    public static String authKey(String name, String key, String... rights) {
        StringBuilder list = new StringBuilder();
        for (String right : rights) {
            list.append(list.length() == 0 ? "" : ", ").append(value(right));
        }
        return "[[auth.keys]]\nname = " + value(name) + "\nkey = " + value(key) + "\nrights = [" + list + "]\n";
    }

    private static Map<String, Object> pairs(Object[] keyValues) {
        if (keyValues.length % 2 != 0) {
            throw new IllegalArgumentException("overrides come in key, value pairs");
        }
        Map<String, Object> map = new LinkedHashMap<>();
        for (int index = 0; index < keyValues.length; index += 2) {
            map.put((String) keyValues[index], keyValues[index + 1]);
        }
        return map;
    }
}
