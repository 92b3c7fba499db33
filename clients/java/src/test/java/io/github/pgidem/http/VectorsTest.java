package io.github.pgidem.http;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Every vector of the package's copy of contract.json, and that the copy is the source's. */
class VectorsTest {
    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> vectors(String name) {
        return (List<Map<String, Object>>) (List<?>) Contract.get("vectors", name);
    }

    @Test
    void theCopyIsTheSource() throws Exception {
        Path source = Path.of(System.getProperty("pgidem.contract", "../contract.json"));
        byte[] copy;
        try (InputStream in = Contract.class.getResourceAsStream("contract.json")) {
            copy = in.readAllBytes();
        }
        assertArrayEquals(Files.readAllBytes(source), copy,
                "the package's contract.json differs from clients/contract.json: run clients/sync-contract.sh");
    }

    @Test
    void keyHeader() {
        for (Map<String, Object> v : vectors("key_header")) {
            assertEquals(v.get("key"), Rules.parseKey((String) v.get("header")), "header " + v.get("header"));
        }
    }

    @Test
    void requestTarget() {
        for (Map<String, Object> v : vectors("request_target")) {
            assertEquals(v.get("target"), Rules.requestTarget((String) v.get("received")), "received " + v.get("received"));
        }
    }

    @Test
    void finalStatus() {
        for (Map<String, Object> v : vectors("final_status")) {
            int status = ((Number) v.get("status")).intValue();
            assertEquals(v.get("final"), Rules.isFinal(status), "status " + status);
        }
    }

    @Test
    void version() {
        for (Map<String, Object> v : vectors("version")) {
            assertEquals(v.get("ok"), Rules.versionOk((String) v.get("installed")), "installed " + v.get("installed"));
        }
        assertFalse(Rules.versionOk(null));
    }

    @SuppressWarnings("unchecked")
    static List<String[]> pairs(Object list) {
        List<String[]> out = new ArrayList<>();
        for (Object pair : (List<Object>) list) out.add(((List<String>) pair).toArray(new String[0]));
        return out;
    }

    @Test
    @SuppressWarnings("unchecked")
    void envelope() {
        for (Map<String, Object> v : vectors("envelope")) {
            Set<String> stored = new LinkedHashSet<>(v.containsKey("stored_headers")
                    ? (List<String>) v.get("stored_headers") : Contract.strings("defaults", "stored_headers"));
            byte[] body = Base64.getDecoder().decode((String) v.get("body_base64"));
            String built = Envelope.build(pairs(v.get("headers")), body, stored);
            // the same JSON value, members in the same order (maps are ordered)
            assertEquals(Json.write(v.get("envelope")), Json.write(Json.parse(built)));
            // and replay is the inverse
            Envelope.Stored back = Envelope.replay(((Number) v.get("status")).intValue(), built);
            assertArrayEquals(body, back.body);
        }
    }

    @Test
    void replay() {
        for (Map<String, Object> v : vectors("replay")) {
            Envelope.Stored r = Envelope.replay(((Number) v.get("response_code")).intValue(), (String) v.get("response_body"));
            assertEquals(((Number) v.get("response_code")).intValue(), r.status);
            List<String[]> want = pairs(v.get("headers"));
            assertEquals(want.size(), r.headers.size(), (String) v.get("about"));
            for (int i = 0; i < want.size(); i++) assertArrayEquals(want.get(i), r.headers.get(i), (String) v.get("about"));
            assertArrayEquals(Base64.getDecoder().decode((String) v.get("body_base64")), r.body);
        }
    }

    @Test
    void legacyReplay() {
        for (Map<String, Object> v : vectors("legacy_replay")) {
            Envelope.Stored r = Envelope.replay(200, (String) v.get("response_body"));
            String type = r.headers.stream().filter(h -> h[0].equals("content-type")).map(h -> h[1]).findFirst().orElse(null);
            assertEquals(v.get("content_type"), type);
            assertEquals(v.get("body"), new String(r.body, StandardCharsets.UTF_8));
        }
    }

    @Test
    void anUnknownEnvelopeVersionIsRefused() {
        assertThrows(IllegalArgumentException.class, () -> Envelope.replay(200, "{\"http\": 3, \"body\": \"x\"}"));
    }

    @Test
    @SuppressWarnings("unchecked")
    void sqlstatesMapByFirstPrefix() {
        for (Object row : (List<Object>) Contract.get("sqlstates")) {
            List<String> pair = (List<String>) row;
            String state = (pair.get(0) + "00000").substring(0, 5);
            assertEquals(pair.get(1), Contract.errorFor(state), state);
        }
        assertEquals("internal_error", Contract.errorFor("XX000"));
        assertEquals("internal_error", Contract.errorFor(null));
    }

    @Test
    void quoteIdentFollowsPostgres() {
        assertEquals("public", Rules.quoteIdent("public"));
        assertEquals("_x1", Rules.quoteIdent("_x1"));
        assertEquals("\"Idem\"", Rules.quoteIdent("Idem"));
        assertEquals("\"a\"\"b\"", Rules.quoteIdent("a\"b"));
        assertEquals("\"1a\"", Rules.quoteIdent("1a"));
    }

    @Test
    void everyStatementBindsItsNumberedArguments() {
        for (String name : List.of("claim", "complete", "fail_final", "release", "assert_fence", "heartbeat",
                "checkpoint", "downstream_key", "version", "locate")) {
            Sql sql = new Sql(Contract.sql(name), "s", Contract.sql("fingerprint_body"));
            assertFalse(sql.text.matches("(?s).*\\$[0-9].*"), name);
            assertFalse(sql.text.contains("{schema}") || sql.text.contains("{fingerprint}"), name);
        }
        Sql claim = new Sql(Contract.sql("claim"), "\"my schema\"", Contract.sql("fingerprint_fields"));
        assertTrue(claim.text.contains("\"my schema\".idem_claim(") && claim.text.contains("\"my schema\".idem_request_hash("));
        // a $ inside a string literal is not a parameter
        assertEquals("SELECT '$1', ?, ?", new Sql("SELECT '$1', $2, $1", "s").text);
    }
}
