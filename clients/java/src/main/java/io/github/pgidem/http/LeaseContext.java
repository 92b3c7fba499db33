package io.github.pgidem.http;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import javax.sql.DataSource;

/**
 * What a lease-mode handler gets (from {@link Idem#lease(jakarta.servlet.ServletRequest)}): it
 * runs outside any transaction, under a fence. {@link #downstreamKey}, {@link #checkpoint} and
 * {@link #heartbeat} each run in a short transaction of their own; {@link #transaction()} opens
 * the completion transaction (after {@code assert_fence}) for the handler's business writes, in
 * which the filter then stores the response. A 55000 from any of them means another attempt took
 * the key over: let it propagate (the filter answers 409 lease_lost).
 */
public final class LeaseContext {
    private final DataSource dataSource;
    private final Statements sql;
    private final String tenant;
    private final String scopedKey;
    private final long fence;
    private final int attempt;
    private final String checkpointPhase;
    private final String checkpointData;
    private final String routeLease;
    private Connection completion;

    LeaseContext(DataSource dataSource, Statements sql, String tenant, String scopedKey, long fence, int attempt,
                 String checkpointPhase, String checkpointData, String routeLease) {
        this.dataSource = dataSource;
        this.sql = sql;
        this.tenant = tenant;
        this.scopedKey = scopedKey;
        this.fence = fence;
        this.attempt = attempt;
        this.checkpointPhase = checkpointPhase;
        this.checkpointData = checkpointData;
        this.routeLease = routeLease;
    }

    /** This attempt's fence token (every write under the lease carries it). */
    public long fence() { return fence; }

    /** 1 for the first attempt, 2 after one takeover, ... */
    public int attempt() { return attempt; }

    /** The phase an earlier attempt checkpointed, or null. */
    public String checkpointPhase() { return checkpointPhase; }

    /** The data (JSON text) an earlier attempt checkpointed, or null: resume from there. */
    public String checkpointData() { return checkpointData; }

    /** The stored key ({@code METHOD route key}). */
    public String scopedKey() { return scopedKey; }

    /** The same UUID on every attempt for this step: send it as the external call's idempotency key. */
    public String downstreamKey(String step) throws SQLException {
        return shortTransaction(String.class, sql.downstreamKey, tenant, scopedKey, step);
    }

    /** Saves progress (phase and JSON data) under the fence, for a later attempt to resume from. */
    public void checkpoint(String phase, String dataJson) throws SQLException {
        shortTransaction(Void.class, sql.checkpoint, tenant, scopedKey, fence, phase, dataJson);
    }

    /**
     * Extends the lease by {@code lease} (an interval, "30 seconds"), or with null by the route's
     * lease, under the fence; returns when it now expires. The route's lease is sent, not NULL:
     * NULL is the database's own default ({@code pg_idem.lease_timeout}), which would shorten a
     * route's longer lease.
     */
    public OffsetDateTime heartbeat(String lease) throws SQLException {
        return shortTransaction(OffsetDateTime.class, sql.heartbeat, tenant, scopedKey, fence,
                lease != null ? lease : routeLease);
    }

    /**
     * The completion transaction's connection (opened on the first call, after {@code assert_fence}
     * locked the key under this fence): make the business writes on it and return; the filter
     * stores the response in it and commits. Commit and rollback on it are refused.
     */
    public Connection transaction() throws SQLException {
        if (completion == null) {
            Connection c = dataSource.getConnection();
            try {
                c.setAutoCommit(false);
                try (PreparedStatement st = sql.assertFence.prepare(c, tenant, scopedKey, fence)) {
                    st.execute();
                }
            } catch (SQLException | RuntimeException e) {
                IdempotencyFilter.discard(c);
                throw e;
            }
            completion = c;
        }
        return Guard.wrap(completion);
    }

    /** The open completion transaction's real connection, or null. */
    Connection completion() {
        return completion;
    }

    private <T> T shortTransaction(Class<T> type, Sql statement, Object... args) throws SQLException {
        try (Connection c = dataSource.getConnection()) {
            c.setAutoCommit(false);
            try {
                T result = null;
                try (PreparedStatement st = statement.prepare(c, args); ResultSet rs = st.executeQuery()) {
                    if (type != Void.class && rs.next()) result = rs.getObject(1, type); // void: nothing to read
                }
                c.commit();
                return result;
            } catch (SQLException | RuntimeException e) {
                c.rollback();
                throw e;
            }
        }
    }
}
