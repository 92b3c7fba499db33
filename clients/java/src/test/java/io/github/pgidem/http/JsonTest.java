package io.github.pgidem.http;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigDecimal;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
    @Test
    void readsEveryKind() {
        Object v = Json.parse(" {\"a\": [1, -2.50, 1e3, true, false, null], \"b\": {\"c\": \"x\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\"}} ");
        Map<?, ?> m = (Map<?, ?>) v;
        assertEquals(List.of("a", "b"), List.copyOf(m.keySet()));
        List<?> a = (List<?>) m.get("a");
        assertEquals(new BigDecimal("1"), a.get(0));
        assertEquals(new BigDecimal("-2.50"), a.get(1)); // exact: the trailing zero is kept
        assertEquals(new BigDecimal("1e3"), a.get(2));
        assertEquals(true, a.get(3));
        assertEquals(false, a.get(4));
        assertNull(a.get(5));
        assertEquals("x\"\\/\n\u00e9\ud83d\ude00", ((Map<?, ?>) m.get("b")).get("c"));
    }

    @Test
    void refusesWhatIsNotJson() {
        for (String bad : List.of("", "{", "[1,]x", "{\"a\" 1}", "\"\u0001\"", "\"\\x\"", "tru", "{} {}", "\"abc")) {
            assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
        }
    }

    @Test
    void writesCompactlyAndRoundTrips() {
        String text = "{\"error\":\"in_progress\",\"message\":\"a \\\"b\\\" \\\\ \\n\\u0001 é\",\"n\":[1,2.50,null,true]}";
        assertEquals(text, Json.write(Json.parse(text)));
        assertEquals("\"\\t\\r\\b\\f\"", Json.quote("\t\r\b\f"));
    }
}
