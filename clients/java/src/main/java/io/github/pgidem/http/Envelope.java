package io.github.pgidem.http;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The stored response ({@code response_body}): envelope {@code "http": 2} out, envelopes 1 and 2
 * (and hand-written jsonb) back in. Headers are ordered lists of {@code [name, value]}.
 */
final class Envelope {
    private Envelope() {}

    /** A response to send: status, header lines in order, the body's bytes. */
    static final class Stored {
        final int status;
        final List<String[]> headers;
        final byte[] body;

        Stored(int status, List<String[]> headers, byte[] body) {
            this.status = status;
            this.headers = headers;
            this.body = body;
        }
    }

    static Set<String> neverStored() {
        return Set.copyOf(Contract.strings("defaults", "never_stored_headers"));
    }

    /** The envelope of a response: the allow-listed headers (never a never-stored one), in order. */
    static String build(List<String[]> headers, byte[] body, Set<String> stored) {
        Set<String> never = neverStored();
        Map<String, Object> kept = new LinkedHashMap<>();
        for (String[] h : headers) {
            String name = h[0].toLowerCase(Locale.ROOT);
            if (!stored.contains(name) || never.contains(name)) continue;
            @SuppressWarnings("unchecked")
            List<Object> values = (List<Object>) kept.computeIfAbsent(name, n -> new ArrayList<>());
            values.add(h[1]);
        }
        Map<String, Object> env = new LinkedHashMap<>();
        env.put("http", 2);
        env.put("headers", kept);
        String text = utf8WithoutNul(body);
        if (text != null) env.put("body", text);
        else env.put("body_base64", Base64.getEncoder().encodeToString(body));
        return Json.write(env);
    }

    private static String utf8WithoutNul(byte[] body) {
        for (byte b : body) if (b == 0) return null;
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(body)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    /**
     * What to send for a stored {@code response_code} and {@code response_body} (jsonb as text, or
     * null). Throws IllegalArgumentException for an envelope of an unknown {@code http}.
     */
    static Stored replay(int status, String responseBody) {
        List<String[]> headers = new ArrayList<>();
        if (responseBody == null) return new Stored(status, headers, new byte[0]);
        Object parsed = Json.parse(responseBody);
        if (!(parsed instanceof Map) || !((Map<?, ?>) parsed).containsKey("http")) {
            headers.add(new String[] {"content-type", "application/json"});
            return new Stored(status, headers, responseBody.getBytes(StandardCharsets.UTF_8));
        }
        Map<?, ?> env = (Map<?, ?>) parsed;
        Object http = env.get("http");
        int version = http instanceof Number ? ((Number) http).intValue() : -1;
        if (!(http instanceof Number) || ((Number) http).doubleValue() != version || (version != 1 && version != 2)) {
            throw new IllegalArgumentException("stored envelope of unknown http " + http);
        }
        Set<String> never = neverStored();
        Object stored = env.get("headers");
        if (stored instanceof Map) {
            for (Map.Entry<?, ?> e : ((Map<?, ?>) stored).entrySet()) {
                String name = ((String) e.getKey()).toLowerCase(Locale.ROOT);
                if (never.contains(name)) continue;
                if (e.getValue() instanceof List) {
                    for (Object v : (List<?>) e.getValue()) headers.add(new String[] {name, String.valueOf(v)});
                } else if (e.getValue() != null) {
                    headers.add(new String[] {name, String.valueOf(e.getValue())});
                }
            }
        }
        byte[] body;
        if (env.get("body_base64") instanceof String) body = Base64.getDecoder().decode((String) env.get("body_base64"));
        else if (env.get("body") instanceof String) body = ((String) env.get("body")).getBytes(StandardCharsets.UTF_8);
        else body = new byte[0];
        return new Stored(status, headers, body);
    }
}
