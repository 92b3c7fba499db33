package io.github.pgidem.http;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * One idempotent route: a method and a route template ({@code /orders/{order_id}/pay}, each
 * parameter written {@code {name}}; the template is the key's scope), with its options. Made with
 * {@link #post(String)} or {@link #of(String, String)}, then the {@code with...} methods.
 */
public final class Route {
    final String method;
    final String template;
    private final String[] segments;
    boolean keyRequired = true;
    List<String> fields;
    String lease;
    String ttl;
    int maxBodyBytes = Contract.defaultInt("max_body_bytes");
    int statementTimeoutMs = Contract.defaultInt("statement_timeout_ms");
    int idleInTransactionTimeoutMs = Contract.defaultInt("idle_in_transaction_timeout_ms");

    private Route(String method, String template) {
        if (!template.startsWith("/")) throw new IllegalArgumentException("a route template starts with /: " + template);
        this.method = method.toUpperCase(Locale.ROOT);
        this.template = template;
        this.segments = template.split("/", -1);
    }

    /** A route of any method. */
    public static Route of(String method, String template) {
        return new Route(method, template);
    }

    /** {@code POST template}. */
    public static Route post(String template) {
        return new Route("POST", template);
    }

    /** A request without a key runs in a plain transaction, without a claim (default: 400 key_missing). */
    public Route keyOptional() {
        keyRequired = false;
        return this;
    }

    /** Fingerprint these JSON fields of the body (pg_idem's idem_request_hash) instead of its bytes. */
    public Route withFields(String... names) {
        fields = new ArrayList<>(List.of(names));
        return this;
    }

    /** Lease mode: the claim is committed at once with this lease ("30 seconds"); see {@link LeaseContext}. */
    public Route withLease(String interval) {
        lease = interval;
        return this;
    }

    /** How long the stored response is kept (an interval; default: the database's pg_idem.default_ttl). */
    public Route withTtl(String interval) {
        ttl = interval;
        return this;
    }

    /** The body limit in bytes (default {@code defaults.max_body_bytes}); larger is 413. */
    public Route withMaxBodyBytes(int bytes) {
        maxBodyBytes = bytes;
        return this;
    }

    /** statement_timeout and idle_in_transaction_session_timeout, set LOCAL to the claim's transaction. */
    public Route withTimeouts(int statementTimeoutMs, int idleInTransactionTimeoutMs) {
        this.statementTimeoutMs = statementTimeoutMs;
        this.idleInTransactionTimeoutMs = idleInTransactionTimeoutMs;
        return this;
    }

    /** Whether a request's method and path (below the context path, raw) fall on this route. */
    boolean matches(String method, String path) {
        if (!this.method.equalsIgnoreCase(method)) return false;
        String[] parts = path.split("/", -1);
        if (parts.length != segments.length) return false;
        for (int i = 0; i < parts.length; i++) {
            String t = segments[i];
            boolean param = t.startsWith("{") && t.endsWith("}");
            if (param ? parts[i].isEmpty() : !t.equals(Rules.percentDecode(parts[i]))) return false;
        }
        return true;
    }
}
