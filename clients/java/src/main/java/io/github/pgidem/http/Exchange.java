package io.github.pgidem.http;

import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UnsupportedEncodingException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/** One request on an idempotent route, from the key to the response (CONTRACT.md, "One request"). */
final class Exchange {
    private final IdempotencyFilter filter;
    private final Route route;
    private final HttpServletRequest req;
    private final HttpServletResponse res;
    private final FilterChain chain;
    private final Outcomes outcomes;
    private String scopedKey;

    Exchange(IdempotencyFilter filter, Route route, HttpServletRequest req, HttpServletResponse res, FilterChain chain) {
        this.filter = filter;
        this.route = route;
        this.req = req;
        this.res = res;
        this.chain = chain;
        this.outcomes = filter.outcomes();
    }

    void run() throws IOException, ServletException {
        String header = req.getHeader(Contract.defaultString("key_header"));
        String key = header == null ? null : Rules.parseKey(header);
        if (header != null && key == null) { reject("key_invalid"); return; }
        if (key == null && route.keyRequired) { reject("key_missing"); return; }
        String tenant = filter.tenantOf(req);
        if (tenant == null || tenant.isEmpty()) { reject("tenant_missing"); return; }
        if (req.getContentLengthLong() > route.maxBodyBytes) { reject("payload_too_large"); return; }
        byte[] body = IdempotencyFilter.readBody(req.getInputStream(), route.maxBodyBytes);
        if (body.length > route.maxBodyBytes) { reject("payload_too_large"); return; }
        HttpServletRequest again = new BodyRequest(req, body);
        if (key != null) again.setAttribute(Idem.KEY, key);
        if (key == null) { plainTransaction(again); return; }

        Connection conn = null;
        try {
            conn = filter.dataSource().getConnection();
            conn.setAutoCommit(false);
            String target = Rules.requestTarget(req.getRequestURI().getBytes(StandardCharsets.ISO_8859_1),
                    req.getQueryString() == null ? null : req.getQueryString().getBytes(StandardCharsets.ISO_8859_1));
            Sql claim = route.fields == null ? filter.statements().claimBody : filter.statements().claimFields;
            String[] fields = route.fields == null ? null : route.fields.toArray(new String[0]);
            Claim c;
            try (PreparedStatement st = claim.prepare(conn, tenant, req.getMethod(), route.template, key, body,
                    route.lease, route.ttl, Integer.toString(route.statementTimeoutMs),
                    Integer.toString(route.idleInTransactionTimeoutMs), target, fields);
                 ResultSet rs = st.executeQuery()) {
                rs.next();
                c = new Claim(rs);
            }
            scopedKey = c.scopedKey;
            switch (c.outcome) {
                case "claimed":
                    outcomes.record("claimed", scopedKey, null);
                    if (route.lease == null) {
                        Connection owned = conn;
                        conn = null;
                        transactionMode(again, owned, tenant, c);
                    } else {
                        conn.commit();
                        IdempotencyFilter.discard(conn);
                        conn = null;
                        leaseMode(again, tenant, c);
                    }
                    return;
                case "completed":
                case "failed":
                    conn.rollback();
                    replay(c);
                    return;
                case "in_progress":
                    conn.rollback();
                    outcomes.record("in_progress", scopedKey, null);
                    Send.error(res, "in_progress", null, c.retryAfter != null ? c.retryAfter : filter.retryAfterSeconds());
                    return;
                case "mismatch":
                    conn.rollback();
                    outcomes.record("mismatch", scopedKey, null);
                    Send.error(res, "mismatch", null, null);
                    return;
                case "stale_key":
                    conn.rollback();
                    outcomes.record("rejected", scopedKey, "stale_key");
                    Send.error(res, "stale_key", null, null);
                    return;
                default:
                    throw new SQLException("pg_idem: unknown claim outcome " + c.outcome);
            }
        } catch (SQLException e) {
            databaseError(e);
        } finally {
            IdempotencyFilter.discard(conn);
        }
    }

    /** The claim's columns. */
    private static final class Claim {
        final String scopedKey, outcome, responseBody, checkpointPhase, checkpointData;
        final long fence;
        final int attempt;
        final Integer responseCode, retryAfter;
        final Long txid;

        Claim(ResultSet rs) throws SQLException {
            scopedKey = rs.getString("scoped_key");
            outcome = rs.getString("outcome");
            fence = rs.getLong("fence");
            attempt = rs.getInt("attempt");
            responseCode = rs.getObject("response_code", Integer.class);
            responseBody = rs.getString("response_body");
            checkpointPhase = rs.getString("checkpoint_phase");
            checkpointData = rs.getString("checkpoint_data");
            retryAfter = rs.getObject("retry_after", Integer.class);
            txid = rs.getObject("txid", Long.class);
        }
    }

    private void transactionMode(HttpServletRequest request, Connection conn, String tenant, Claim c)
            throws IOException, ServletException {
        BufferedResponse buffered = new BufferedResponse(res);
        try {
            bound(request, Guard.wrap(conn), null, buffered);
            int status = buffered.status();
            if (!Rules.isFinal(status)) {
                conn.rollback();
                outcomes.record("rolled_back", scopedKey, "status " + status);
                buffered.sendTo(res);
                return;
            }
            if (!store(conn, tenant, c.fence, buffered, c.txid)) {
                conn.rollback();
                outcomes.record("transaction_ended", scopedKey,
                        "the handler ended the claim's transaction (SQL COMMIT or ROLLBACK): nothing stored");
                Send.error(res, "internal_error", null, null);
                return;
            }
            conn.commit();
            outcomes.record("stored", scopedKey, "status " + status);
            buffered.sendTo(res);
        } catch (SQLException e) {
            IdempotencyFilter.discard(conn);
            conn = null;
            databaseError(e);
        } catch (IOException | ServletException | RuntimeException | Error e) {
            IdempotencyFilter.discard(conn);
            conn = null;
            outcomes.record("rolled_back", scopedKey, e.toString());
            throw e;
        } finally {
            IdempotencyFilter.discard(conn);
        }
    }

    private void leaseMode(HttpServletRequest request, String tenant, Claim c) throws IOException, ServletException {
        LeaseContext lease = new LeaseContext(filter.dataSource(), filter.statements(), tenant, scopedKey, c.fence,
                c.attempt, c.checkpointPhase, c.checkpointData, route.lease);
        BufferedResponse buffered = new BufferedResponse(res);
        try {
            bound(request, null, lease, buffered);
            int status = buffered.status();
            if (!Rules.isFinal(status)) {
                release(lease, tenant, c.fence);
                outcomes.record("rolled_back", scopedKey, "status " + status);
                buffered.sendTo(res);
                return;
            }
            lease.transaction();
            Connection conn = lease.completion();
            if (!store(conn, tenant, c.fence, buffered, null)) {
                throw new SQLException("pg_idem: the completion found no claim under this fence", "55000");
            }
            conn.commit();
            IdempotencyFilter.discard(conn);
            outcomes.record("stored", scopedKey, "status " + status);
            buffered.sendTo(res);
        } catch (SQLException e) {
            IdempotencyFilter.discard(lease.completion());
            if ("lease_lost".equals(Contract.errorFor(e.getSQLState()))) {
                outcomes.record("lease_lost", scopedKey, e.getMessage());
                Send.error(res, "lease_lost", null, null);
            } else {
                release(lease, tenant, c.fence);
                databaseError(e);
            }
        } catch (IOException | ServletException | RuntimeException | Error e) {
            SQLException cause = sqlCause(e);
            if (cause != null && "lease_lost".equals(Contract.errorFor(cause.getSQLState()))) {
                IdempotencyFilter.discard(lease.completion());
                outcomes.record("lease_lost", scopedKey, cause.getMessage());
                Send.error(res, "lease_lost", null, null);
                return;
            }
            release(lease, tenant, c.fence);
            outcomes.record("rolled_back", scopedKey, e.toString());
            throw e;
        }
    }

    /** The SQLException a handler's exception wraps (55000 from a lease call), or null. */
    private static SQLException sqlCause(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SQLException) return (SQLException) t;
            if (t.getCause() == t) break;
        }
        return null;
    }

    /** Rolls the completion back and releases the key under the fence, so a retry claims it at once. */
    private void release(LeaseContext lease, String tenant, long fence) {
        IdempotencyFilter.discard(lease.completion());
        try (Connection c = filter.dataSource().getConnection()) {
            c.setAutoCommit(false);
            try (PreparedStatement st = filter.statements().release.prepare(c, tenant, scopedKey, fence)) {
                st.execute();
            }
            c.commit();
        } catch (SQLException e) {
            // the lease runs out by itself and the retry waits for it; the request's outcome
            // is already counted, so this is only logged
            System.getLogger("io.github.pgidem.http").log(System.Logger.Level.WARNING,
                    "pg_idem could not release {0}: {1}", scopedKey, e.getMessage());
        }
    }

    /** complete / fail_final with the envelope; false when no row (the transaction changed). */
    private boolean store(Connection conn, String tenant, long fence, BufferedResponse r, Long txid) throws SQLException {
        String envelope = Envelope.build(r.headerLines(), r.bodyBytes(), filter.storedHeaders());
        Sql statement = r.status() < 400 ? filter.statements().complete : filter.statements().failFinal;
        try (PreparedStatement st = statement.prepare(conn, tenant, scopedKey, fence, r.status(), envelope, txid);
             ResultSet rs = st.executeQuery()) {
            return rs.next();
        }
    }

    /** Runs the handler with the connection or lease context bound to the request and the thread. */
    private void bound(HttpServletRequest request, Connection conn, LeaseContext lease, BufferedResponse buffered)
            throws IOException, ServletException {
        if (conn != null) request.setAttribute(Idem.CONNECTION, conn);
        if (lease != null) request.setAttribute(Idem.LEASE, lease);
        Idem.CURRENT_CONNECTION.set(conn);
        Idem.CURRENT_LEASE.set(lease);
        try {
            chain.doFilter(request, buffered);
            buffered.flushBuffer();
        } finally {
            Idem.CURRENT_CONNECTION.remove();
            Idem.CURRENT_LEASE.remove();
            request.removeAttribute(Idem.CONNECTION);
            request.removeAttribute(Idem.LEASE);
        }
    }

    /** A request without a key on a key-optional route: a plain transaction, no claim. */
    private void plainTransaction(HttpServletRequest request) throws IOException, ServletException {
        Connection conn = null;
        try {
            conn = filter.dataSource().getConnection();
            conn.setAutoCommit(false);
            BufferedResponse buffered = new BufferedResponse(res);
            bound(request, Guard.wrap(conn), null, buffered);
            if (Rules.isFinal(buffered.status())) conn.commit();
            else conn.rollback();
            buffered.sendTo(res);
        } catch (SQLException e) {
            databaseError(e);
        } finally {
            IdempotencyFilter.discard(conn);
        }
    }

    private void replay(Claim c) throws IOException {
        Envelope.Stored stored;
        try {
            stored = Envelope.replay(c.responseCode, c.responseBody);
        } catch (IllegalArgumentException e) {
            outcomes.record("database_error", scopedKey, e.getMessage());
            Send.error(res, "internal_error", null, null);
            return;
        }
        outcomes.record("replayed", scopedKey, null);
        res.setHeader(filter.replayHeader(), Contract.defaultString("replay_header_value"));
        Send.response(res, stored);
    }

    private void reject(String error) throws IOException {
        outcomes.record("rejected", null, error);
        Send.error(res, error, null, null);
    }

    private void databaseError(SQLException e) throws IOException {
        String error = Contract.errorFor(e.getSQLState());
        outcomes.record("database_error", scopedKey, e.getSQLState() + " " + e.getMessage());
        if (res.isCommitted()) return;
        res.reset();
        Send.error(res, error, error.equals("invalid_request") ? primaryMessage(e) : null, null);
    }

    /** The database's own message (PgJDBC's ServerErrorMessage when present, else the first line). */
    static String primaryMessage(SQLException e) {
        try {
            Method m = e.getClass().getMethod("getServerErrorMessage");
            Object server = m.invoke(e);
            if (server != null) {
                Object text = server.getClass().getMethod("getMessage").invoke(server);
                if (text != null) return text.toString();
            }
        } catch (ReflectiveOperationException | RuntimeException ignored) {
            // not PgJDBC: fall back to the exception's text
        }
        String text = String.valueOf(e.getMessage());
        int nl = text.indexOf('\n');
        if (nl >= 0) text = text.substring(0, nl);
        return text.startsWith("ERROR: ") ? text.substring(7) : text;
    }

    /** The request with its body, already read for the fingerprint, readable again. */
    private static final class BodyRequest extends HttpServletRequestWrapper {
        private final byte[] body;

        BodyRequest(HttpServletRequest req, byte[] body) {
            super(req);
            this.body = body;
        }

        @Override
        public ServletInputStream getInputStream() {
            ByteArrayInputStream in = new ByteArrayInputStream(body);
            return new ServletInputStream() {
                @Override public int read() { return in.read(); }
                @Override public int read(byte[] b, int off, int len) { return in.read(b, off, len); }
                @Override public boolean isFinished() { return in.available() == 0; }
                @Override public boolean isReady() { return true; }
                @Override public void setReadListener(ReadListener l) { throw new UnsupportedOperationException(); }
            };
        }

        @Override
        public BufferedReader getReader() throws UnsupportedEncodingException {
            String cs = getCharacterEncoding() == null ? "UTF-8" : getCharacterEncoding();
            return new BufferedReader(new InputStreamReader(getInputStream(), cs));
        }
    }
}
