package io.github.pgidem.http;

import jakarta.servlet.http.HttpServlet;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.sql.Connection;
import java.sql.Statement;
import org.apache.catalina.Lifecycle;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.core.StandardContext;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.SimpleInstanceManager;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;
import org.postgresql.ds.PGSimpleDataSource;

/** An embedded Tomcat on a free loopback port with the filter on /* and one servlet on /. */
final class Server implements AutoCloseable {
    static final HttpClient CLIENT = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    final Tomcat tomcat = new Tomcat();
    final int port;

    @SuppressWarnings("deprecation")
    Server(IdempotencyFilter filter, HttpServlet servlet) throws Exception {
        tomcat.setBaseDir(Files.createTempDirectory("pg-idem-test").toString());
        Connector connector = new Connector();
        connector.setPort(0);
        connector.setProperty("address", "127.0.0.1");
        tomcat.setConnector(connector);
        StandardContext ctx = new StandardContext();
        ctx.setName("");
        ctx.setPath("");
        ctx.addLifecycleListener(e -> {
            if (e.getType().equals(Lifecycle.CONFIGURE_START_EVENT)) ctx.setConfigured(true);
        });
        ctx.setIgnoreAnnotations(true);
        ctx.setInstanceManager(new SimpleInstanceManager());
        tomcat.getHost().addChild(ctx);
        Tomcat.addServlet(ctx, "app", servlet);
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
        port = connector.getLocalPort();
    }

    HttpResponse<byte[]> post(String target, String body, String... headers) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + target))
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (headers.length > 0) b.headers(headers);
        return CLIENT.send(b.build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    @Override
    public void close() throws org.apache.catalina.LifecycleException {
        tomcat.stop();
        tomcat.destroy();
    }

    /** The test database (PG_IDEM_HTTP_TEST_DSN, started by test.sh with pg_idem's SQL edition). */
    static PGSimpleDataSource dataSource() {
        String dsn = System.getenv("PG_IDEM_HTTP_TEST_DSN");
        if (dsn == null) throw new IllegalStateException("PG_IDEM_HTTP_TEST_DSN is not set: run clients/java/test.sh");
        return ReferenceApp.dataSource(dsn);
    }

    static void sql(String... statements) throws Exception {
        try (Connection c = dataSource().getConnection(); Statement st = c.createStatement()) {
            for (String s : statements) st.execute(s);
        }
    }
}
