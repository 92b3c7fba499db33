package io.github.pgidem.http;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.UnavailableException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.InputStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import javax.sql.DataSource;

/**
 * The {@code Idempotency-Key} filter (Jakarta Servlet 6): for each configured {@link Route}, one
 * request is claimed in pg_idem inside the transaction of the handler's own writes, and its final
 * response is stored with them and committed before the client sees it; a retry replays it.
 * Handlers find the claim's connection with {@link Idem#connection(jakarta.servlet.ServletRequest)}.
 * Requests of other routes pass through untouched. Made with {@link #builder(DataSource)}.
 */
public final class IdempotencyFilter implements Filter {
    private static final Map<DataSource, String> LOCATED = new IdentityHashMap<>();

    private final DataSource dataSource;
    private final Function<HttpServletRequest, String> tenantHook;
    private final String singleTenant;
    private final String schemaOption;
    private final Set<String> storedHeaders;
    private final String replayHeader;
    private final int retryAfterSeconds;
    private final List<Route> routes;
    private final Outcomes outcomes = new Outcomes();
    private volatile Statements sql;

    private IdempotencyFilter(Builder b) {
        this.dataSource = b.dataSource;
        this.tenantHook = b.tenantHook;
        this.singleTenant = b.singleTenant;
        this.schemaOption = b.schema;
        this.storedHeaders = b.storedHeaders;
        this.replayHeader = b.replayHeader;
        this.retryAfterSeconds = b.retryAfterSeconds;
        this.routes = List.copyOf(b.routes);
    }

    /** A builder for a filter on this DataSource (connections must be PostgreSQL's). */
    public static Builder builder(DataSource dataSource) {
        return new Builder(dataSource);
    }

    /** The counts of every outcome since this filter was built. */
    public Outcomes outcomes() {
        return outcomes;
    }

    /** Locates pg_idem and checks its version (once per DataSource); a servlet container calls it. */
    @Override
    public void init(FilterConfig config) throws ServletException {
        try {
            verify();
        } catch (SQLException | IllegalStateException e) {
            throw new UnavailableException("pg_idem: " + e.getMessage());
        }
    }

    /**
     * Finds pg_idem's schema ({@code sql.locate}, or the {@code schema} option) and checks the
     * installed version. Throws IllegalStateException saying what to do when pg_idem is missing,
     * too old, or its schema holds {@code idem_*} functions of another role.
     */
    public void verify() throws SQLException {
        if (sql != null) return;
        String schema;
        synchronized (LOCATED) {
            schema = LOCATED.get(dataSource);
            if (schema == null) {
                schema = locate();
                LOCATED.put(dataSource, schema);
            }
        }
        sql = new Statements(schema);
    }

    private String locate() throws SQLException {
        try (Connection c = dataSource.getConnection()) {
            c.setAutoCommit(false);
            try {
                String schema;
                if (schemaOption != null) {
                    schema = Rules.quoteIdent(schemaOption);
                } else {
                    try (PreparedStatement st = new Sql(Contract.sql("locate"), "").prepare(c);
                         ResultSet rs = st.executeQuery()) {
                        if (!rs.next()) throw new IllegalStateException("pg_idem is not installed in this database "
                                + "(CREATE EXTENSION pg_idem, or install its SQL edition)");
                        schema = rs.getString("schema");
                        String foreign = rs.getString("foreign_functions");
                        if (foreign != null) throw new IllegalStateException("pg_idem's schema " + schema
                                + " holds idem_* functions of another role: " + foreign + "; drop them");
                    }
                }
                String min = Contract.get("min_pg_idem_version");
                String version;
                try (PreparedStatement st = new Sql(Contract.sql("version"), schema).prepare(c);
                     ResultSet rs = st.executeQuery()) {
                    version = rs.next() ? rs.getString(1) : null;
                } catch (SQLException e) {
                    // no idem_version(): the released 0.5.0 and older
                    if (!"42883".equals(e.getSQLState())) throw e;
                    throw new IllegalStateException("pg_idem in " + schema + " has no idem_version(): it is older "
                            + "than " + min + ", which this package needs (ALTER EXTENSION pg_idem UPDATE)");
                }
                if (!Rules.versionOk(version)) throw new IllegalStateException("pg_idem " + version
                        + " is installed; this package needs " + min + " or later (ALTER EXTENSION pg_idem UPDATE)");
                return schema;
            } finally {
                c.rollback();
            }
        }
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        if (!(request instanceof HttpServletRequest) || !(response instanceof HttpServletResponse)) {
            chain.doFilter(request, response);
            return;
        }
        HttpServletRequest req = (HttpServletRequest) request;
        HttpServletResponse res = (HttpServletResponse) response;
        String path = req.getRequestURI().substring(req.getContextPath().length());
        Route route = null;
        for (Route r : routes) if (r.matches(req.getMethod(), path)) { route = r; break; }
        if (route == null) {
            chain.doFilter(req, res);
            return;
        }
        if (sql == null) {
            try {
                verify();
            } catch (SQLException | IllegalStateException e) {
                throw new ServletException("pg_idem: " + e.getMessage(), e);
            }
        }
        new Exchange(this, route, req, res, chain).run();
    }

    // --- what Exchange uses ---

    Statements statements() { return sql; }
    DataSource dataSource() { return dataSource; }
    Set<String> storedHeaders() { return storedHeaders; }
    String replayHeader() { return replayHeader; }
    int retryAfterSeconds() { return retryAfterSeconds; }

    /** The request's tenant: the hook's answer, or the single tenant; null or "" is none. */
    String tenantOf(HttpServletRequest req) {
        return tenantHook != null ? tenantHook.apply(req) : singleTenant;
    }

    /** Rolls back and closes a connection, ignoring what fails (it is being given up). */
    static void discard(Connection c) {
        if (c == null) return;
        try {
            if (!c.isClosed() && !c.getAutoCommit()) c.rollback();
        } catch (SQLException | RuntimeException ignored) {
            // a broken connection: closing it is all that is left
        }
        try {
            c.close();
        } catch (SQLException | RuntimeException ignored) {
            // already gone
        }
    }

    /** Reads at most limit + 1 bytes of a body (more than limit: too large). */
    static byte[] readBody(InputStream in, int limit) throws IOException {
        return in.readNBytes(limit + 1);
    }

    /** The filter's configuration; {@link #build()} refuses what the contract forbids. */
    public static final class Builder {
        private final DataSource dataSource;
        private Function<HttpServletRequest, String> tenantHook;
        private String singleTenant;
        private String schema;
        private Set<String> storedHeaders = new LinkedHashSet<>(Contract.strings("defaults", "stored_headers"));
        private String replayHeader = Contract.defaultString("replay_header");
        private int retryAfterSeconds = Contract.defaultInt("retry_after_seconds");
        private final List<Route> routes = new ArrayList<>();

        private Builder(DataSource dataSource) {
            if (dataSource == null) throw new IllegalArgumentException("a DataSource is required");
            this.dataSource = dataSource;
        }

        /** The tenant of a request, from the application's auth (never a value the client picks freely). */
        public Builder tenant(Function<HttpServletRequest, String> hook) {
            this.tenantHook = hook;
            return this;
        }

        /** Every caller shares this one tenant's key namespace (instead of a tenant hook). */
        public Builder singleTenant(String tenant) {
            this.singleTenant = tenant;
            return this;
        }

        /** pg_idem's schema, instead of finding it with {@code sql.locate}. */
        public Builder schema(String schema) {
            this.schema = schema;
            return this;
        }

        /** The response headers stored and replayed (lower-cased; never one of {@code never_stored_headers}). */
        public Builder storedHeaders(Collection<String> names) {
            storedHeaders = new LinkedHashSet<>();
            for (String n : names) storedHeaders.add(n.toLowerCase(Locale.ROOT));
            return this;
        }

        /** The header a replay carries (default {@code Idempotent-Replayed}). */
        public Builder replayHeader(String name) {
            this.replayHeader = name;
            return this;
        }

        /** Retry-After for an in-progress key whose holder has no lease (default 1). */
        public Builder retryAfterSeconds(int seconds) {
            this.retryAfterSeconds = seconds;
            return this;
        }

        /** An idempotent route. */
        public Builder route(Route route) {
            routes.add(route);
            return this;
        }

        /** The filter; IllegalArgumentException for a configuration the contract refuses. */
        public IdempotencyFilter build() {
            if (tenantHook == null && (singleTenant == null || singleTenant.isEmpty())) {
                throw new IllegalArgumentException("pg_idem: give a tenant hook (tenant(request -> ...)), or "
                        + "singleTenant(\"name\") when every caller shares one namespace");
            }
            if (tenantHook != null && singleTenant != null) {
                throw new IllegalArgumentException("pg_idem: give a tenant hook or singleTenant, not both");
            }
            Set<String> never = Envelope.neverStored();
            for (String h : storedHeaders) {
                if (never.contains(h)) throw new IllegalArgumentException("pg_idem: the header " + h
                        + " is never stored (it would be replayed to whoever holds the key)");
            }
            return new IdempotencyFilter(this);
        }
    }
}
