package io.github.pgidem.http;

import jakarta.servlet.ServletResponse;
import jakarta.servlet.ServletResponseWrapper;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.lang.reflect.Field;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Locale;

/** Writing responses: a buffered or stored one, and the contract's error bodies. */
final class Send {
    private Send() {}

    static void response(HttpServletResponse real, Envelope.Stored r) throws IOException {
        real.setStatus(r.status);
        for (String[] h : r.headers) {
            if (h[0].equalsIgnoreCase("content-type")) contentType(real, h[1]);
            else real.addHeader(h[0], h[1]);
        }
        real.setContentLength(r.body.length);
        if (r.body.length > 0) real.getOutputStream().write(r.body);
        real.flushBuffer();
    }

    /**
     * Sets Content-Type to exactly this value. Tomcat rewrites a type with a charset
     * ({@code text/plain; charset=utf-8} becomes {@code text/plain;charset=utf-8}), which would make
     * a replay differ from the response another service stored; there, the value is put on
     * Tomcat's own response as it is. Other containers keep what they are given.
     */
    static void contentType(HttpServletResponse real, String value) {
        real.setContentType(value);
        if (value.equals(real.getContentType())) return;
        try {
            ServletResponse r = real;
            while (r instanceof ServletResponseWrapper) r = ((ServletResponseWrapper) r).getResponse();
            if (!r.getClass().getName().equals("org.apache.catalina.connector.ResponseFacade")) return;
            Field field = r.getClass().getDeclaredField("response");
            field.setAccessible(true);
            Object connector = field.get(r);
            Object coyote = connector.getClass().getMethod("getCoyoteResponse").invoke(connector);
            coyote.getClass().getMethod("setCharacterEncoding", String.class).invoke(coyote, (Object) null);
            coyote.getClass().getMethod("setContentTypeNoCharset", String.class).invoke(coyote, value);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // another Tomcat: its own spelling of the same media type is sent
        }
    }

    /** {"error":..,"message":..} with the error's status, and Retry-After where it has one. */
    static void error(HttpServletResponse real, String error, String message, Integer retryAfter) throws IOException {
        String text = "{\"error\":" + Json.quote(error) + ",\"message\":"
                + Json.quote(message != null ? message : Contract.errorMessage(error)) + "}";
        byte[] body = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        real.setStatus(Contract.errorStatus(error));
        real.setContentType("application/json");
        if (Contract.errorRetries(error)) {
            int seconds = retryAfter != null ? retryAfter : Contract.defaultInt("retry_after_seconds");
            real.setHeader("Retry-After", Integer.toString(seconds));
        }
        real.setContentLength(body.length);
        real.getOutputStream().write(body);
        real.flushBuffer();
    }

    static String httpDate(long millis) {
        return DateTimeFormatter.RFC_1123_DATE_TIME.withLocale(Locale.ROOT)
                .format(Instant.ofEpochMilli(millis).atOffset(ZoneOffset.UTC));
    }

    static String cookie(Cookie c) {
        StringBuilder out = new StringBuilder(c.getName()).append('=').append(c.getValue() == null ? "" : c.getValue());
        if (c.getPath() != null) out.append("; Path=").append(c.getPath());
        if (c.getDomain() != null) out.append("; Domain=").append(c.getDomain());
        if (c.getMaxAge() >= 0) out.append("; Max-Age=").append(c.getMaxAge());
        if (c.getSecure()) out.append("; Secure");
        if (c.isHttpOnly()) out.append("; HttpOnly");
        return out.toString();
    }
}
