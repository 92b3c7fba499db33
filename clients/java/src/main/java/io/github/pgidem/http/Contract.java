package io.github.pgidem.http;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/**
 * The package's copy of clients/contract.json (a resource next to this class), the one source of
 * every fact: SQL text, defaults, error names and messages, SQLSTATE mapping and outcome names.
 */
final class Contract {
    static final Map<String, Object> ROOT = load();

    private Contract() {}

    @SuppressWarnings("unchecked")
    private static Map<String, Object> load() {
        try (InputStream in = Contract.class.getResourceAsStream("contract.json")) {
            if (in == null) throw new IllegalStateException("contract.json is missing from the jar");
            return (Map<String, Object>) Json.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The value at a path of member names, e.g. {@code get("defaults", "key_header")}. */
    @SuppressWarnings("unchecked")
    static <T> T get(String... path) {
        Object v = ROOT;
        for (String name : path) {
            v = ((Map<String, Object>) v).get(name);
            if (v == null) return null;
        }
        return (T) v;
    }

    static String sql(String name) {
        return get("sql", name);
    }

    static String defaultString(String name) {
        return get("defaults", name);
    }

    static int defaultInt(String name) {
        return ((Number) get("defaults", name)).intValue();
    }

    @SuppressWarnings("unchecked")
    static List<String> strings(String... path) {
        return (List<String>) (List<?>) get(path);
    }

    static int errorStatus(String error) {
        return ((Number) get("errors", error, "status")).intValue();
    }

    /** The error's fixed message, or null where the database's own message is used. */
    static String errorMessage(String error) {
        return get("errors", error, "message");
    }

    static boolean errorRetries(String error) {
        return Boolean.TRUE.equals(get("errors", error, "retry_after"));
    }

    /** The error named for a SQLSTATE (first prefix that matches), or internal_error. */
    @SuppressWarnings("unchecked")
    static String errorFor(String sqlstate) {
        if (sqlstate != null) {
            for (Object row : (List<Object>) get("sqlstates")) {
                List<String> pair = (List<String>) row;
                if (sqlstate.startsWith(pair.get(0))) return pair.get(1);
            }
        }
        return "internal_error";
    }
}
