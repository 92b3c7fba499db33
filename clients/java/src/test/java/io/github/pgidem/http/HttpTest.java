package io.github.pgidem.http;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The filter over real HTTP (embedded Tomcat, java.net.http) against a real PostgreSQL with pg_idem. */
class HttpTest {
    static final String LONG_ROUTE = "/" + "l".repeat(60);
    static IdempotencyFilter filter;
    static Server server;

    /** What the handler does, chosen by the X-Do header. */
    static final class App extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void service(HttpServletRequest req, HttpServletResponse res) throws IOException {
            String does = String.valueOf(req.getHeader("X-Do"));
            try {
                if (req.getRequestURI().equals("/lease")) { lease(req, res); return; }
                Connection conn = Idem.connection(req);
                try (PreparedStatement st = conn.prepareStatement("INSERT INTO jt (tenant, k, body) VALUES (?, ?, ?)")) {
                    st.setString(1, req.getHeader("X-Tenant"));
                    st.setString(2, Idem.key(req));
                    st.setString(3, new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
                    st.execute();
                }
                res.setHeader("X-Same-Connection", String.valueOf(Idem.connection() == conn));
                switch (does) {
                    case "commit-api": conn.commit(); break;
                    case "rollback-api": conn.rollback(); break;
                    case "commit-sql": try (Statement st = conn.createStatement()) { st.execute("COMMIT"); } break;
                    case "sleep": Thread.sleep(1500); break;
                    case "throw-after-write":
                        res.getOutputStream().write("secret".getBytes(StandardCharsets.UTF_8));
                        res.flushBuffer();
                        throw new IllegalStateException("after writing");
                    case "unavailable": res.setStatus(503); return;
                    case "text":
                        res.setStatus(201);
                        res.setContentType("text/plain; charset=utf-8");
                        res.getWriter().write("Zahlung über 5 €");
                        return;
                    default: break;
                }
                res.setStatus(201);
                res.setContentType("application/json");
                res.addHeader("Link", "</a>; rel=\"first\"");
                res.addHeader("Set-Cookie", "session=1");
                res.addHeader("Link", "</b>; rel=\"next\"");
                res.getWriter().write("{\"ok\":\"é\"}");
            } catch (SQLException | InterruptedException e) {
                throw new IllegalStateException(e);
            }
        }

        private void lease(HttpServletRequest req, HttpServletResponse res) throws SQLException, IOException {
            LeaseContext lease = Idem.lease(req);
            String bank = lease.downstreamKey("bank");
            if (!bank.equals(lease.downstreamKey("bank"))) throw new IllegalStateException("downstream key changed");
            lease.checkpoint("sent", "{\"bank\":\"" + bank + "\"}");
            // null extends by the route's lease (5 seconds), not the database's default (1 minute)
            long byRoute = secondsLeft(lease.heartbeat(null));
            long byArgument = secondsLeft(lease.heartbeat("10 seconds"));
            if (byRoute > 5 || byArgument < 6 || byArgument > 10) {
                throw new IllegalStateException("heartbeats left " + byRoute + " s and " + byArgument + " s");
            }
            try (PreparedStatement st = lease.transaction().prepareStatement("INSERT INTO jt (tenant, k) VALUES (?, ?)")) {
                st.setString(1, req.getHeader("X-Tenant"));
                st.setString(2, Idem.key(req));
                st.execute();
            }
            res.setStatus(201);
            res.setContentType("text/plain");
            res.getWriter().write(bank + " " + lease.attempt() + " " + lease.checkpointPhase());
        }
    }

    static long secondsLeft(OffsetDateTime until) {
        return Duration.between(OffsetDateTime.now(), until).getSeconds();
    }

    @BeforeAll
    static void start() throws Exception {
        Server.sql("CREATE TABLE IF NOT EXISTS jt (tenant text, k text, body text)");
        filter = IdempotencyFilter.builder(Server.dataSource())
                .tenant(req -> req.getHeader("X-Tenant"))
                .storedHeaders(List.of("content-type", "link", "x-same-connection"))
                .route(Route.post("/t/{id}").withMaxBodyBytes(64))
                .route(Route.post("/fields").withFields("a", "b"))
                .route(Route.post(LONG_ROUTE))
                .route(Route.post("/lease").withLease("5 seconds"))
                .route(Route.post("/optional").keyOptional())
                .build();
        server = new Server(filter, new App());
    }

    @AfterAll
    static void stop() throws Exception {
        server.close();
    }

    static String tenant() {
        return "t-" + UUID.randomUUID();
    }

    static String key() {
        return UUID.randomUUID().toString();
    }

    static HttpResponse<byte[]> post(String target, String body, String tenant, String key, String does) throws Exception {
        return server.post(target, body, "X-Tenant", tenant, "Idempotency-Key", key, "X-Do", does);
    }

    static String text(HttpResponse<byte[]> r) {
        return new String(r.body(), StandardCharsets.UTF_8);
    }

    static String error(String name) {
        return "{\"error\":\"" + name + "\",\"message\":" + Json.quote(Contract.errorMessage(name)) + "}";
    }

    static long rows(String tenant) throws Exception {
        try (Connection c = Server.dataSource().getConnection();
             PreparedStatement st = c.prepareStatement("SELECT count(*) FROM jt WHERE tenant = ?")) {
            st.setString(1, tenant);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    @Test
    void aFinalResponseIsStoredWithItsWritesAndReplayedWithoutTheCookie() throws Exception {
        String t = tenant(), k = key();
        HttpResponse<byte[]> first = post("/t/1", "{}", t, k, "ok");
        assertEquals(201, first.statusCode());
        assertEquals(List.of("session=1"), first.headers().allValues("set-cookie"));
        assertEquals("true", first.headers().firstValue("x-same-connection").orElse(null), "the thread's accessor");
        HttpResponse<byte[]> again = post("/t/1", "{}", t, k, "ok");
        assertEquals(201, again.statusCode());
        assertArrayEquals(first.body(), again.body());
        assertEquals(List.of("</a>; rel=\"first\"", "</b>; rel=\"next\""), again.headers().allValues("link"));
        assertEquals(List.of(), again.headers().allValues("set-cookie"));
        assertEquals("true", again.headers().firstValue("idempotent-replayed").orElse(null));
        assertFalse(first.headers().firstValue("idempotent-replayed").isPresent());
        assertEquals(1, rows(t));
        assertTrue(filter.outcomes().snapshot().get("replayed") >= 1);
    }

    @Test
    void theContentTypeIsSentStoredAndReplayedAsTheHandlerWroteIt() throws Exception {
        String t = tenant(), k = key();
        HttpResponse<byte[]> first = post("/t/1", "{}", t, k, "text");
        assertEquals("text/plain; charset=utf-8", first.headers().firstValue("content-type").orElse(null));
        assertEquals("Zahlung über 5 €", text(first));
        HttpResponse<byte[]> again = post("/t/1", "{}", t, k, "text");
        assertEquals("text/plain; charset=utf-8", again.headers().firstValue("content-type").orElse(null));
        assertArrayEquals(first.body(), again.body());
    }

    @Test
    void anOptionalKeyRunsWithoutAClaimInAPlainTransaction() throws Exception {
        String t = tenant();
        for (int i = 0; i < 2; i++) {
            HttpResponse<byte[]> r = server.post("/optional", "{}", "X-Tenant", t, "X-Do", "ok");
            assertEquals(201, r.statusCode());
            assertFalse(r.headers().firstValue("idempotent-replayed").isPresent());
        }
        assertEquals(2, rows(t)); // committed, twice: no key, no deduplication
        assertEquals(503, server.post("/optional", "{}", "X-Tenant", t, "X-Do", "unavailable").statusCode());
        assertEquals(2, rows(t)); // a non-final status rolls back
    }

    @Test
    void keyTenantAndBodyAreCheckedBeforeAnyClaim() throws Exception {
        String t = tenant();
        HttpResponse<byte[]> r = server.post("/t/1", "{}", "X-Tenant", t);
        assertEquals(400, r.statusCode());
        assertEquals(error("key_missing"), text(r));
        r = server.post("/t/1", "{}", "X-Tenant", t, "Idempotency-Key", "with space");
        assertEquals(error("key_invalid"), text(r));
        r = server.post("/t/1", "{}", "Idempotency-Key", key());
        assertEquals(400, r.statusCode());
        assertEquals(error("tenant_missing"), text(r));
        r = post("/t/1", "x".repeat(65), t, key(), "ok");
        assertEquals(413, r.statusCode());
        assertEquals(error("payload_too_large"), text(r));
        assertEquals(0, rows(t));
    }

    @Test
    void theHandlerCannotCommitOrRollBackThroughJdbc() throws Exception {
        for (String does : List.of("commit-api", "rollback-api")) {
            String t = tenant(), k = key();
            assertEquals(500, post("/t/1", "{}", t, k, does).statusCode());
            assertEquals(0, rows(t));
            // nothing was stored: the retry runs
            assertEquals(201, post("/t/1", "{}", t, k, "ok").statusCode());
            assertEquals(1, rows(t));
        }
    }

    @Test
    void aSqlCommitInTheHandlerIsTransactionEnded() throws Exception {
        String t = tenant(), k = key();
        long before = filter.outcomes().snapshot().get("transaction_ended");
        HttpResponse<byte[]> r = post("/t/1", "{}", t, k, "commit-sql");
        assertEquals(500, r.statusCode());
        assertEquals(error("internal_error"), text(r));
        assertEquals(before + 1, filter.outcomes().snapshot().get("transaction_ended"));
        // the raw COMMIT made the write and the claim durable without a response: in_progress
        assertEquals(1, rows(t));
        assertEquals(409, post("/t/1", "{}", t, k, "ok").statusCode());
    }

    @Test
    void nothingReachesTheClientBeforeTheCommit() throws Exception {
        String t = tenant(), k = key();
        HttpResponse<byte[]> r = post("/t/1", "{}", t, k, "throw-after-write");
        assertEquals(500, r.statusCode());
        assertFalse(text(r).contains("secret"), text(r));
        assertEquals(0, rows(t));
    }

    @Test
    void aNonFinalStatusRollsBackAndTheRetryRuns() throws Exception {
        String t = tenant(), k = key();
        assertEquals(503, post("/t/1", "{}", t, k, "unavailable").statusCode());
        assertEquals(0, rows(t));
        assertEquals(201, post("/t/1", "{}", t, k, "ok").statusCode());
        assertEquals(1, rows(t));
    }

    @Test
    void theFingerprintBindsTheNormalisedTarget() throws Exception {
        String t = tenant(), k = key();
        assertEquals(201, post("/t/1?b=2&a=1", "{}", t, k, "ok").statusCode());
        HttpResponse<byte[]> r = post("/t/1?a=1&b=2", "{}", t, k, "ok");
        assertEquals(422, r.statusCode());
        assertEquals(error("mismatch"), text(r));
        assertEquals(422, post("/t/2?b=2&a=1", "{}", t, k, "ok").statusCode());
        String k2 = key();
        assertEquals(201, post("/t/%7ex?q=%41", "{}", t, k2, "ok").statusCode());
        assertEquals("true", post("/t/~x?q=A", "{}", t, k2, "ok").headers().firstValue("idempotent-replayed").orElse(null));
    }

    @Test
    void aKeyInProgressIs409WithRetryAfter() throws Exception {
        String t = tenant(), k = key();
        CompletableFuture<HttpResponse<byte[]>> slow = CompletableFuture.supplyAsync(() -> {
            try {
                return post("/t/1", "{}", t, k, "sleep");
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(500);
        HttpResponse<byte[]> busy = post("/t/1", "{}", t, k, "ok");
        assertEquals(409, busy.statusCode());
        assertEquals(error("in_progress"), text(busy));
        assertEquals(String.valueOf(Contract.defaultInt("retry_after_seconds")), busy.headers().firstValue("retry-after").orElse(null));
        assertEquals(201, slow.get().statusCode());
    }

    @Test
    void theDatabasesOwnMessageForAnInvalidRequest() throws Exception {
        // METHOD + route template + a 200-character key is longer than pg_idem.max_key_length
        HttpResponse<byte[]> r = post(LONG_ROUTE, "{}", tenant(), "k".repeat(200), "ok");
        assertEquals(400, r.statusCode(), text(r));
        Map<?, ?> body = (Map<?, ?>) Json.parse(text(r));
        assertEquals("invalid_request", body.get("error"));
        assertNotNull(body.get("message"));
        assertFalse(((String) body.get("message")).startsWith("ERROR"), text(r));
    }

    @Test
    void theFieldsFingerprintIgnoresKeyOrderAndSpacing() throws Exception {
        String t = tenant(), k = key();
        assertEquals(201, post("/fields", "{\"a\":1,\"b\":2,\"c\":3}", t, k, "ok").statusCode());
        HttpResponse<byte[]> again = post("/fields", "{ \"b\": 2.0, \"a\": 1, \"c\": 4 }", t, k, "ok");
        assertEquals("true", again.headers().firstValue("idempotent-replayed").orElse(null), text(again));
        assertEquals(422, post("/fields", "{\"a\":1,\"b\":3}", t, k, "ok").statusCode());
    }

    @Test
    void leaseModeRunsItsHelpersUnderTheFence() throws Exception {
        String t = tenant(), k = key();
        HttpResponse<byte[]> first = post("/lease", "{}", t, k, "ok");
        assertEquals(201, first.statusCode(), text(first));
        String[] parts = text(first).split(" ");
        assertEquals(36, parts[0].length());
        assertEquals("1", parts[1]);
        HttpResponse<byte[]> again = post("/lease", "{}", t, k, "ok");
        assertArrayEquals(first.body(), again.body());
        assertEquals(1, rows(t));
    }

    @Test
    void theOutcomesNameEveryOutcome() {
        assertEquals(Contract.strings("outcomes"), List.copyOf(filter.outcomes().snapshot().keySet()));
        assertTrue(filter.outcomes().toJson().startsWith("{\"claimed\":"));
    }

    @Test
    void theBodyFingerprintMatchesTheVectors() throws Exception {
        Sql sql = new Sql("SELECT " + Contract.sql("fingerprint_body"), "public");
        try (Connection c = Server.dataSource().getConnection()) {
            for (Map<String, Object> v : VectorsTest.vectors("fingerprint_body")) {
                byte[] body = Base64.getDecoder().decode((String) v.get("body_base64"));
                try (PreparedStatement st = sql.prepare(c, null, v.get("method"), null, null, body, null, null, null,
                        null, v.get("target"), null); ResultSet rs = st.executeQuery()) {
                    rs.next();
                    assertEquals(v.get("fingerprint"), rs.getString(1), v.toString());
                }
            }
        }
    }

    @Test
    void startingRefusesAMissingPgIdemForeignFunctionsAndAnOldVersion() throws Exception {
        Server.sql("DROP DATABASE IF EXISTS java_no_pg_idem", "CREATE DATABASE java_no_pg_idem");
        org.postgresql.ds.PGSimpleDataSource bare = Server.dataSource();
        bare.setDatabaseName("java_no_pg_idem");
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> IdempotencyFilter.builder(bare).singleTenant("a").build().verify());
        assertTrue(e.getMessage().contains("not installed"), e.getMessage());

        Server.sql("DROP SCHEMA IF EXISTS java_old CASCADE", "CREATE SCHEMA java_old",
                "CREATE FUNCTION java_old.idem_version() RETURNS text LANGUAGE sql AS $$SELECT '0.4.0'$$");
        e = assertThrows(IllegalStateException.class,
                () -> IdempotencyFilter.builder(Server.dataSource()).singleTenant("a").schema("java_old").build().verify());
        assertTrue(e.getMessage().contains("0.4.0") && e.getMessage().contains(Contract.get("min_pg_idem_version")), e.getMessage());

        Server.sql("DROP SCHEMA IF EXISTS java_noversion CASCADE", "CREATE SCHEMA java_noversion");
        e = assertThrows(IllegalStateException.class, () -> IdempotencyFilter.builder(Server.dataSource())
                .singleTenant("a").schema("java_noversion").build().verify());
        assertTrue(e.getMessage().contains("idem_version()") && e.getMessage().contains(Contract.get("min_pg_idem_version")),
                e.getMessage());

        Server.sql("DROP ROLE IF EXISTS java_planter", "CREATE ROLE java_planter",
                "GRANT CREATE ON SCHEMA public TO java_planter", "SET ROLE java_planter",
                "CREATE FUNCTION public.idem_planted() RETURNS int LANGUAGE sql AS $$SELECT 1$$");
        try {
            e = assertThrows(IllegalStateException.class,
                    () -> IdempotencyFilter.builder(Server.dataSource()).singleTenant("a").build().verify());
            assertTrue(e.getMessage().contains("idem_planted()"), e.getMessage());
        } finally {
            Server.sql("DROP FUNCTION public.idem_planted()", "REVOKE CREATE ON SCHEMA public FROM java_planter",
                    "DROP ROLE java_planter");
        }
        // the server's own pg_idem passes
        IdempotencyFilter.builder(Server.dataSource()).singleTenant("a").build().verify();
        assertNotEquals(null, filter.statements());
    }
}
