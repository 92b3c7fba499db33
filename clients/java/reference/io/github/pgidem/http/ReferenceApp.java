package io.github.pgidem.http;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.File;
import java.io.IOException;
import java.math.BigDecimal;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.catalina.Lifecycle;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.core.StandardContext;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.SimpleInstanceManager;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * The reference app of clients/CONTRACT.md ("The reference apps") on embedded Tomcat 10.1:
 * {@code java -cp clients/java/build/reference.jar:... io.github.pgidem.http.ReferenceApp --dsn URI --port N}.
 * It lives in the package's Java package only to read the contract's constants with the package's
 * own reader; the filter is configured through the public API alone.
 */
public final class ReferenceApp extends HttpServlet {
    private static final long serialVersionUID = 1L;
    private static final Set<String> SEEN_TRANSIENT = ConcurrentHashMap.newKeySet();
    private final transient IdempotencyFilter filter;

    private ReferenceApp(IdempotencyFilter filter) {
        this.filter = filter;
    }

    @SuppressWarnings("deprecation") // addServletMappingDecoded: still the embedded way in 10.1
    public static void main(String[] args) throws Exception {
        String dsn = null;
        int port = 8000;
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].equals("--dsn")) dsn = args[i + 1];
            else if (args[i].equals("--port")) port = Integer.parseInt(args[i + 1]);
        }
        if (dsn == null) {
            System.err.println("usage: ReferenceApp --dsn postgresql://... --port N");
            System.exit(2);
        }
        PGSimpleDataSource ds = dataSource(dsn);
        try (Connection c = ds.getConnection(); Statement st = c.createStatement()) {
            c.setAutoCommit(false);
            // CONTRACT.md "The reference apps": the apps' lock, then the tables (named with their
            // schema: the search_path may start with a schema the app cannot create in)
            for (String statement : Contract.strings("reference_app", "tables")) st.execute(statement);
            c.commit();
        }
        int statementMs = ((Number) Contract.get("reference_app", "statement_timeout_ms")).intValue();
        int idleMs = ((Number) Contract.get("reference_app", "idle_in_transaction_timeout_ms")).intValue();
        IdempotencyFilter filter = IdempotencyFilter.builder(ds)
                .tenant(request -> request.getHeader("X-Tenant"))
                .storedHeaders(Contract.strings("reference_app", "stored_headers"))
                .route(Route.post("/payments").withTimeouts(statementMs, idleMs))
                .route(Route.post(Contract.get("reference_app", "order_route")).withTimeouts(statementMs, idleMs))
                .route(Route.post("/payouts").withLease(Contract.get("reference_app", "payout_lease")))
                .build();
        try {
            filter.verify(); // refuse to start here, with the reason, rather than serve 503s
        } catch (IllegalStateException e) {
            System.err.println("pg_idem: " + e.getMessage());
            System.exit(1);
        }

        Tomcat tomcat = new Tomcat();
        File base = Files.createTempDirectory("pg-idem-reference").toFile();
        base.deleteOnExit();
        tomcat.setBaseDir(base.getAbsolutePath());
        Connector connector = new Connector();
        connector.setPort(port);
        connector.setProperty("address", "127.0.0.1");
        connector.setProperty("maxThreads", "50");
        tomcat.setConnector(connector);
        // Tomcat.addContext's listener reads servlet annotations, which needs jakarta.annotation
        // (not in Debian's embed jar); this context has none, so it is only marked configured
        StandardContext ctx = new StandardContext();
        ctx.setName("");
        ctx.setPath("");
        ctx.addLifecycleListener(event -> {
            if (event.getType().equals(Lifecycle.CONFIGURE_START_EVENT)) ctx.setConfigured(true);
        });
        ctx.setIgnoreAnnotations(true);
        ctx.setInstanceManager(new SimpleInstanceManager());
        tomcat.getHost().addChild(ctx);
        Tomcat.addServlet(ctx, "app", new ReferenceApp(filter));
        ctx.addServletMappingDecoded("/", "app");
        FilterDef def = new FilterDef();
        def.setFilterName("pg_idem");
        def.setFilter(filter);
        ctx.addFilterDef(def);
        FilterMap map = new FilterMap();
        map.setFilterName("pg_idem");
        map.addURLPattern("/*");
        ctx.addFilterMap(map);
        tomcat.start();
        if (!ctx.getState().isAvailable()) {
            System.err.println("the servlet context did not start (see above)");
            System.exit(1);
        }
        tomcat.getServer().await();
    }

    /** A DataSource for a postgresql:// URI (PgJDBC takes jdbc:postgresql://host:port/db and properties). */
    static PGSimpleDataSource dataSource(String dsn) {
        URI uri = URI.create(dsn);
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setServerNames(new String[] {uri.getHost() == null ? "localhost" : uri.getHost()});
        ds.setPortNumbers(new int[] {uri.getPort() < 0 ? 5432 : uri.getPort()});
        String path = uri.getPath();
        if (path != null && path.length() > 1) ds.setDatabaseName(decode(path.substring(1)));
        String userInfo = uri.getRawUserInfo();
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            ds.setUser(decode(colon < 0 ? userInfo : userInfo.substring(0, colon)));
            if (colon >= 0) ds.setPassword(decode(userInfo.substring(colon + 1)));
        }
        ds.setPrepareThreshold(0); // no named server-side statements: PgBouncer in transaction mode
        return ds;
    }

    private static String decode(String s) {
        return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
    }

    @Override
    protected void service(HttpServletRequest req, HttpServletResponse res) throws IOException {
        String path = req.getRequestURI();
        try {
            if (req.getMethod().equals("GET") && path.equals("/_pg_idem/outcomes")) {
                send(res, 200, "application/json", filter.outcomes().toJson());
            } else if (req.getMethod().equals("POST") && path.equals("/payments")) {
                payment(req, res, null);
            } else if (req.getMethod().equals("POST") && path.matches("/orders/[^/]+/pay")) {
                payment(req, res, path.split("/")[2]);
            } else if (req.getMethod().equals("POST") && path.equals("/payouts")) {
                payout(req, res);
            } else {
                send(res, 404, "application/json", "{\"error\":\"not_found\",\"message\":\"No such route.\"}");
            }
        } catch (SQLException | InterruptedException e) {
            throw new IllegalStateException(e); // the framework's 500; the filter rolls back
        }
    }

    private static void send(HttpServletResponse res, int status, String type, String body) throws IOException {
        res.setStatus(status);
        res.setContentType(type);
        res.getOutputStream().write(body.getBytes(StandardCharsets.UTF_8));
    }

    /** The body as a JSON object with an integer amount, or null (after answering 400). */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> body(HttpServletRequest req, HttpServletResponse res) throws IOException {
        Object parsed;
        try {
            parsed = Json.parse(new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            parsed = null;
        }
        if (parsed instanceof Map && ((Map<String, Object>) parsed).get("amount") instanceof BigDecimal) {
            BigDecimal amount = (BigDecimal) ((Map<String, Object>) parsed).get("amount");
            try {
                amount.longValueExact();
                return (Map<String, Object>) parsed;
            } catch (ArithmeticException e) {
                // not an integer: a bad request
            }
        }
        send(res, 400, "application/json",
                "{\"error\":\"bad_request\",\"message\":\"The body must be a JSON object with an integer amount.\"}");
        return null;
    }

    private static void payment(HttpServletRequest req, HttpServletResponse res, String orderId)
            throws IOException, SQLException, InterruptedException {
        Map<String, Object> body = body(req, res);
        if (body == null) return;
        long amount = ((BigDecimal) body.get("amount")).longValueExact();
        if ("final".equals(body.get("fail"))) {
            send(res, 402, "application/json",
                    Contract.<String>get("reference_app", "declined_json").replace("{amount}", Long.toString(amount)));
            return;
        }
        String tenant = req.getHeader("X-Tenant");
        String key = Idem.key(req);
        Connection conn = Idem.connection(req);
        long id;
        try (PreparedStatement st = conn.prepareStatement(
                "INSERT INTO payments (tenant, idem_key, amount, order_id) VALUES (?, ?, ?, ?) RETURNING id")) {
            st.setString(1, tenant);
            st.setString(2, key);
            st.setLong(3, amount);
            if (orderId == null) st.setNull(4, java.sql.Types.BIGINT);
            else st.setLong(4, Long.parseLong(orderId));
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                id = rs.getLong(1);
            }
        }
        if (body.get("sleep_ms") instanceof BigDecimal) Thread.sleep(((BigDecimal) body.get("sleep_ms")).longValue());
        if ("transient".equals(body.get("fail")) && SEEN_TRANSIENT.add(tenant + "\n" + key)) {
            throw new IllegalStateException("a transient failure (the first attempt of this key)");
        }
        if ("api".equals(body.get("commit"))) conn.commit(); // refused: SQLException, 500
        if ("sql".equals(body.get("commit"))) {
            try (Statement st = conn.createStatement()) {
                st.execute("COMMIT");
            }
        }
        res.setHeader("Location", "/payments/" + id);
        if (Boolean.TRUE.equals(body.get("set_cookie"))) res.addHeader("Set-Cookie", Contract.get("reference_app", "cookie"));
        if (Boolean.TRUE.equals(body.get("links"))) {
            for (String link : Contract.strings("reference_app", "links")) res.addHeader("Link", link);
        }
        String ids = Long.toString(id), amounts = Long.toString(amount);
        if ("text".equals(body.get("format")) && orderId == null) {
            send(res, 201, "text/plain; charset=utf-8",
                    Contract.<String>get("reference_app", "payment_text").replace("{id}", ids).replace("{amount}", amounts));
        } else {
            send(res, 201, "application/json",
                    Contract.<String>get("reference_app", "payment_json").replace("{id}", ids).replace("{amount}", amounts));
        }
    }

    private static void payout(HttpServletRequest req, HttpServletResponse res)
            throws IOException, SQLException, InterruptedException {
        Map<String, Object> body = body(req, res);
        if (body == null) return;
        long amount = ((BigDecimal) body.get("amount")).longValueExact();
        LeaseContext lease = Idem.lease(req);
        String bankRef = lease.downstreamKey("bank");
        if (Boolean.TRUE.equals(body.get("heartbeat"))) lease.heartbeat(null); // by the route's lease
        if (body.get("sleep_ms") instanceof BigDecimal) Thread.sleep(((BigDecimal) body.get("sleep_ms")).longValue());
        Connection conn = lease.transaction();
        long id;
        try (PreparedStatement st = conn.prepareStatement(
                "INSERT INTO payouts (tenant, idem_key, amount, attempt) VALUES (?, ?, ?, ?) RETURNING id")) {
            st.setString(1, req.getHeader("X-Tenant"));
            st.setString(2, Idem.key(req));
            st.setLong(3, amount);
            st.setInt(4, lease.attempt());
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                id = rs.getLong(1);
            }
        }
        res.setHeader("Location", "/payouts/" + id);
        send(res, 201, "application/json", Contract.<String>get("reference_app", "payout_json")
                .replace("{id}", Long.toString(id)).replace("{amount}", Long.toString(amount))
                .replace("{attempt}", Integer.toString(lease.attempt())).replace("{bank_ref}", bankRef));
    }

}
