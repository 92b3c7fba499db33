package io.github.pgidem.http;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/** The contract's pure rules: key parsing, target normalisation, final statuses, versions. */
final class Rules {
    private Rules() {}

    /**
     * The key of an {@code Idempotency-Key} header value: the bare form or a Structured Field
     * string, spaces and tabs around it dropped; null when empty, malformed or too long.
     */
    static String parseKey(String header) {
        int start = 0, end = header.length();
        while (start < end && (header.charAt(start) == ' ' || header.charAt(start) == '\t')) start++;
        while (end > start && (header.charAt(end - 1) == ' ' || header.charAt(end - 1) == '\t')) end--;
        String v = header.substring(start, end);
        String key;
        if (v.startsWith("\"")) {
            if (v.length() < 2 || !v.endsWith("\"")) return null;
            StringBuilder out = new StringBuilder();
            for (int i = 1; i < v.length() - 1; i++) {
                char c = v.charAt(i);
                if (c < 0x20 || c > 0x7E) return null;
                if (c == '"') return null;
                if (c == '\\') {
                    if (i + 1 >= v.length() - 1) return null;
                    char e = v.charAt(++i);
                    if (e != '"' && e != '\\') return null;
                    out.append(e);
                } else {
                    out.append(c);
                }
            }
            key = out.toString();
        } else {
            for (int i = 0; i < v.length(); i++) {
                char c = v.charAt(i);
                if (c < 0x21 || c > 0x7E || c == '"') return null;
            }
            key = v;
        }
        if (key.isEmpty() || key.length() > Contract.defaultInt("max_key_length")) return null;
        return key;
    }

    private static final String UNRESERVED = "-._~";
    private static final String RESERVED = ":/?#[]@!$&'()*+,;=";
    private static final char[] HEX = "0123456789ABCDEF".toCharArray();

    private static boolean unreserved(int b) {
        return (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
                || (b < 0x80 && UNRESERVED.indexOf(b) >= 0);
    }

    private static int hex(int b) {
        return Character.digit(b, 16);
    }

    /** RFC 3986 §6.2.2 on one component's octets (the contract's rule). */
    static String normaliseComponent(byte[] in) {
        StringBuilder out = new StringBuilder(in.length);
        for (int i = 0; i < in.length; i++) {
            int b = in[i] & 0xFF;
            if (b == '%' && i + 2 < in.length && hex(in[i + 1]) >= 0 && hex(in[i + 2]) >= 0) {
                int decoded = hex(in[i + 1]) * 16 + hex(in[i + 2]);
                if (unreserved(decoded)) out.append((char) decoded);
                else out.append('%').append(HEX[decoded >> 4]).append(HEX[decoded & 15]);
                i += 2;
            } else if (unreserved(b) || (b < 0x80 && RESERVED.indexOf(b) >= 0)) {
                out.append((char) b);
            } else {
                out.append('%').append(HEX[b >> 4]).append(HEX[b & 15]);
            }
        }
        return out.toString();
    }

    /** The normalised request target of a path and a query string (null or "" for none). */
    static String requestTarget(byte[] path, byte[] query) {
        String target = normaliseComponent(path);
        if (query != null && query.length > 0) target += "?" + normaliseComponent(query);
        return target;
    }

    /** The normalised target of a target as text (its characters taken as UTF-8 octets). */
    static String requestTarget(String received) {
        int q = received.indexOf('?');
        String path = q < 0 ? received : received.substring(0, q);
        String query = q < 0 ? null : received.substring(q + 1);
        return requestTarget(path.getBytes(StandardCharsets.UTF_8),
                query == null ? null : query.getBytes(StandardCharsets.UTF_8));
    }

    /** Whether a status is final (stored with its claim) by {@code defaults.final_status}. */
    static boolean isFinal(int status) {
        Map<String, Object> rule = Contract.get("defaults", "final_status");
        List<?> except = (List<?>) rule.get("except");
        return status >= ((Number) rule.get("from")).intValue() && status <= ((Number) rule.get("to")).intValue()
                && except.stream().noneMatch(n -> ((Number) n).intValue() == status);
    }

    /** MAJOR.MINOR.PATCH as three integers, or null for anything else. */
    static int[] version(String v) {
        if (v == null || !v.matches("[0-9]+\\.[0-9]+\\.[0-9]+")) return null;
        String[] parts = v.split("\\.");
        try {
            return new int[] {Integer.parseInt(parts[0]), Integer.parseInt(parts[1]), Integer.parseInt(parts[2])};
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** Whether an installed pg_idem version is at least {@code min_pg_idem_version}. */
    static boolean versionOk(String installed) {
        int[] have = version(installed);
        int[] need = version(Contract.get("min_pg_idem_version"));
        if (have == null) return false;
        for (int i = 0; i < 3; i++) {
            if (have[i] != need[i]) return have[i] > need[i];
        }
        return true;
    }

    /** quote_ident's rule: bare when lower-case letters, digits and _ starting with a letter or _. */
    static String quoteIdent(String name) {
        if (name.matches("[a-z_][a-z0-9_]*")) return name;
        return "\"" + name.replace("\"", "\"\"") + "\"";
    }

    /** Decodes %HH escapes into octets (for matching a raw path against a template). */
    static String percentDecode(String raw) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] in = raw.getBytes(StandardCharsets.ISO_8859_1);
        for (int i = 0; i < in.length; i++) {
            if (in[i] == '%' && i + 2 < in.length && hex(in[i + 1]) >= 0 && hex(in[i + 2]) >= 0) {
                out.write(hex(in[i + 1]) * 16 + hex(in[i + 2]));
                i += 2;
            } else {
                out.write(in[i]);
            }
        }
        return out.toString(StandardCharsets.UTF_8);
    }
}
