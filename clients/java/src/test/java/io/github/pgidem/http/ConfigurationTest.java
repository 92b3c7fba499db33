package io.github.pgidem.http;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** What build() refuses: no tenant rule, two tenant rules, a never-stored header in the allow-list. */
class ConfigurationTest {
    private final DataSource ds = new PGSimpleDataSource();

    @Test
    void aTenantHookOrSingleTenantIsRequired() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> IdempotencyFilter.builder(ds).route(Route.post("/p")).build());
        assertTrue(e.getMessage().contains("singleTenant"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> IdempotencyFilter.builder(ds).singleTenant("").build());
        IdempotencyFilter.builder(ds).singleTenant("acme").build();
        IdempotencyFilter.builder(ds).tenant(r -> "acme").build();
    }

    @Test
    void bothTenantRulesAreRefused() {
        assertThrows(IllegalArgumentException.class,
                () -> IdempotencyFilter.builder(ds).tenant(r -> "a").singleTenant("b").build());
    }

    @Test
    void everyNeverStoredHeaderIsRefusedInTheAllowList() {
        for (String name : Contract.strings("defaults", "never_stored_headers")) {
            String spelled = name.toUpperCase();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> IdempotencyFilter.builder(ds)
                    .singleTenant("a").storedHeaders(List.of("content-type", spelled)).build(), name);
            assertTrue(e.getMessage().contains(name), e.getMessage());
        }
        IdempotencyFilter.builder(ds).singleTenant("a").storedHeaders(List.of("content-type", "link")).build();
    }

    @Test
    void routeTemplatesMatchOneSegmentPerParameter() {
        Route r = Route.post("/orders/{order_id}/pay");
        assertTrue(r.matches("POST", "/orders/7/pay"));
        assertTrue(r.matches("post", "/orders/%37/pay"));
        assertTrue(!r.matches("POST", "/orders//pay") && !r.matches("GET", "/orders/7/pay")
                && !r.matches("POST", "/orders/7/pay/x") && !r.matches("POST", "/orders/7"));
    }
}
