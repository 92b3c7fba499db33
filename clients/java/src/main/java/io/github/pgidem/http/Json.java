package io.github.pgidem.http;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The smallest JSON reader and writer the package needs: contract.json, stored envelopes and the
 * error bodies. Objects read as {@link LinkedHashMap} (member order kept), arrays as {@link List},
 * numbers as {@link BigDecimal} (exact), strings, booleans and {@code null}. The package has no
 * dependency besides the servlet API and java.sql, so it carries this instead of a JSON library.
 */
final class Json {
    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /** Parses one JSON value; anything after it but whitespace is an error. */
    static Object parse(String text) {
        Json p = new Json(text);
        Object value = p.value();
        p.space();
        if (p.at != text.length()) throw p.error("trailing characters");
        return value;
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("invalid JSON at offset " + at + ": " + what);
    }

    private void space() {
        while (at < text.length() && " \t\r\n".indexOf(text.charAt(at)) >= 0) at++;
    }

    private char peek() {
        if (at >= text.length()) throw error("unexpected end");
        return text.charAt(at);
    }

    private void expect(char c) {
        if (peek() != c) throw error("expected '" + c + "'");
        at++;
    }

    private boolean literal(String word) {
        if (!text.startsWith(word, at)) return false;
        at += word.length();
        return true;
    }

    private Object value() {
        space();
        char c = peek();
        switch (c) {
            case '{': return object();
            case '[': return array();
            case '"': return string();
            default:
                if (literal("true")) return Boolean.TRUE;
                if (literal("false")) return Boolean.FALSE;
                if (literal("null")) return null;
                return number();
        }
    }

    private Map<String, Object> object() {
        expect('{');
        Map<String, Object> map = new LinkedHashMap<>();
        space();
        if (peek() == '}') { at++; return map; }
        while (true) {
            space();
            String name = string();
            space();
            expect(':');
            map.put(name, value());
            space();
            if (peek() == ',') { at++; continue; }
            expect('}');
            return map;
        }
    }

    private List<Object> array() {
        expect('[');
        List<Object> list = new ArrayList<>();
        space();
        if (peek() == ']') { at++; return list; }
        while (true) {
            list.add(value());
            space();
            if (peek() == ',') { at++; continue; }
            expect(']');
            return list;
        }
    }

    private String string() {
        expect('"');
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = peek();
            at++;
            if (c == '"') return out.toString();
            if (c < 0x20) throw error("control character in string");
            if (c != '\\') { out.append(c); continue; }
            char e = peek();
            at++;
            switch (e) {
                case '"': case '\\': case '/': out.append(e); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (at + 4 > text.length()) throw error("short \\u escape");
                    try {
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                    } catch (NumberFormatException x) {
                        throw error("bad \\u escape");
                    }
                    at += 4;
                    break;
                default: throw error("bad escape");
            }
        }
    }

    private BigDecimal number() {
        int start = at;
        while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) at++;
        if (start == at) throw error("unexpected character");
        try {
            return new BigDecimal(text.substring(start, at));
        } catch (NumberFormatException x) {
            throw error("bad number");
        }
    }

    /** Writes a string as a JSON string literal: compact, non-ASCII kept as is. */
    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** Writes maps, lists, strings, numbers, booleans and null compactly (no spaces). */
    static String write(Object v) {
        StringBuilder out = new StringBuilder();
        write(v, out);
        return out.toString();
    }

    private static void write(Object v, StringBuilder out) {
        if (v == null) out.append("null");
        else if (v instanceof String) out.append(quote((String) v));
        else if (v instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) out.append(',');
                first = false;
                out.append(quote((String) e.getKey())).append(':');
                write(e.getValue(), out);
            }
            out.append('}');
        } else if (v instanceof List) {
            out.append('[');
            boolean first = true;
            for (Object item : (List<?>) v) {
                if (!first) out.append(',');
                first = false;
                write(item, out);
            }
            out.append(']');
        } else if (v instanceof Number || v instanceof Boolean) out.append(v);
        else throw new IllegalArgumentException("cannot write " + v.getClass());
    }
}
