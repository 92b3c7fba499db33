package io.github.pgidem.http;

import jakarta.servlet.ServletRequest;
import java.sql.Connection;

/**
 * Where a handler finds what the filter bound to its request: the claim's connection (in its
 * transaction; commit, rollback and setAutoCommit are refused) and, in lease mode, the
 * {@link LeaseContext}. From the request ({@link #connection(ServletRequest)}) or, for code that
 * cannot see it, from the thread serving the request ({@link #connection()}).
 */
public final class Idem {
    /** The request attribute holding the claim's {@link Connection}. */
    public static final String CONNECTION = "io.github.pgidem.http.connection";
    /** The request attribute holding the {@link LeaseContext} (lease mode). */
    public static final String LEASE = "io.github.pgidem.http.lease";

    /** The request attribute holding the parsed key (a String). */
    public static final String KEY = "io.github.pgidem.http.key";

    static final ThreadLocal<Connection> CURRENT_CONNECTION = new ThreadLocal<>();
    static final ThreadLocal<LeaseContext> CURRENT_LEASE = new ThreadLocal<>();

    private Idem() {}

    /** The request's claim connection, or null (lease mode, or a route the filter does not handle). */
    public static Connection connection(ServletRequest request) {
        return (Connection) request.getAttribute(CONNECTION);
    }

    /** The claim connection of the request this thread is serving, or null. */
    public static Connection connection() {
        return CURRENT_CONNECTION.get();
    }

    /** The request's parsed Idempotency-Key ({@code "abc"} and {@code abc} are both abc), or null. */
    public static String key(ServletRequest request) {
        return (String) request.getAttribute(KEY);
    }

    /** The request's lease context, or null outside lease mode. */
    public static LeaseContext lease(ServletRequest request) {
        return (LeaseContext) request.getAttribute(LEASE);
    }

    /** The lease context of the request this thread is serving, or null. */
    public static LeaseContext lease() {
        return CURRENT_LEASE.get();
    }
}
