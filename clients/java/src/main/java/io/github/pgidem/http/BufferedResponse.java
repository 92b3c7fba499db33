package io.github.pgidem.http;

import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

/**
 * Holds the handler's whole response (status, header lines in order, body bytes) so that nothing
 * reaches the client before the claim's transaction committed. {@link #sendTo} writes it out.
 */
final class BufferedResponse extends HttpServletResponseWrapper {
    private int status = SC_OK;
    private final List<String[]> headers = new ArrayList<>();
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();
    private String contentType;
    private String charset;
    private ServletOutputStream stream;
    private PrintWriter writer;

    BufferedResponse(HttpServletResponse real) {
        super(real);
    }

    int status() {
        return status;
    }

    /** The header lines in the order the handler set them (Content-Type with its charset). */
    List<String[]> headerLines() {
        List<String[]> out = new ArrayList<>(headers);
        String type = fullContentType();
        if (type != null) out.add(0, new String[] {"Content-Type", type});
        return out;
    }

    byte[] bodyBytes() {
        if (writer != null) writer.flush();
        return body.toByteArray();
    }

    private String fullContentType() {
        if (contentType == null) return null;
        if (charset == null || contentType.toLowerCase(Locale.ROOT).contains("charset=")) return contentType;
        return contentType + ";charset=" + charset;
    }

    /** Sends status, headers and body to the real response. */
    void sendTo(HttpServletResponse real) throws IOException {
        Send.response(real, new Envelope.Stored(status, headerLines(), bodyBytes()));
    }

    private void remove(String name) {
        headers.removeIf(h -> h[0].equalsIgnoreCase(name));
    }

    private boolean isContentType(String name) {
        return name.equalsIgnoreCase("content-type");
    }

    @Override public void setStatus(int sc) { status = sc; }
    @Override public int getStatus() { return status; }
    @Override public void sendError(int sc) { status = sc; }
    @Override public void sendError(int sc, String msg) { status = sc; }

    @Override
    public void sendRedirect(String location) {
        status = SC_FOUND;
        setHeader("Location", location);
    }

    @Override
    public void setHeader(String name, String value) {
        if (isContentType(name)) { setContentType(value); return; }
        remove(name);
        if (value != null) headers.add(new String[] {name, value});
    }

    @Override
    public void addHeader(String name, String value) {
        if (isContentType(name)) { setContentType(value); return; }
        if (value != null) headers.add(new String[] {name, value});
    }

    @Override public void setIntHeader(String name, int value) { setHeader(name, Integer.toString(value)); }
    @Override public void addIntHeader(String name, int value) { addHeader(name, Integer.toString(value)); }
    @Override public void setDateHeader(String name, long date) { setHeader(name, Send.httpDate(date)); }
    @Override public void addDateHeader(String name, long date) { addHeader(name, Send.httpDate(date)); }
    @Override public void addCookie(Cookie cookie) { addHeader("Set-Cookie", Send.cookie(cookie)); }

    @Override
    public boolean containsHeader(String name) {
        if (isContentType(name)) return contentType != null;
        return headers.stream().anyMatch(h -> h[0].equalsIgnoreCase(name));
    }

    @Override
    public String getHeader(String name) {
        if (isContentType(name)) return fullContentType();
        return headers.stream().filter(h -> h[0].equalsIgnoreCase(name)).map(h -> h[1]).findFirst().orElse(null);
    }

    @Override
    public Collection<String> getHeaders(String name) {
        List<String> out = new ArrayList<>();
        for (String[] h : headers) if (h[0].equalsIgnoreCase(name)) out.add(h[1]);
        return out;
    }

    @Override
    public Collection<String> getHeaderNames() {
        List<String> out = new ArrayList<>();
        for (String[] h : headers) if (!out.contains(h[0])) out.add(h[0]);
        return out;
    }

    @Override
    public void setContentType(String type) {
        if (type == null) { contentType = null; return; }
        contentType = type;
        int at = type.toLowerCase(Locale.ROOT).indexOf("charset=");
        if (at >= 0) charset = type.substring(at + 8).trim();
    }

    @Override public String getContentType() { return fullContentType(); }
    @Override public void setCharacterEncoding(String cs) { charset = cs; }
    @Override public String getCharacterEncoding() { return charset == null ? "ISO-8859-1" : charset; }
    @Override public void setContentLength(int len) {}
    @Override public void setContentLengthLong(long len) {}
    @Override public void flushBuffer() { if (writer != null) writer.flush(); }
    @Override public boolean isCommitted() { return false; }
    @Override public void resetBuffer() { body.reset(); }

    @Override
    public void reset() {
        body.reset();
        headers.clear();
        status = SC_OK;
        contentType = null;
        charset = null;
    }

    @Override
    public ServletOutputStream getOutputStream() {
        if (writer != null) throw new IllegalStateException("getWriter() was called");
        if (stream == null) {
            stream = new ServletOutputStream() {
                @Override public void write(int b) { body.write(b); }
                @Override public void write(byte[] b, int off, int len) { body.write(b, off, len); }
                @Override public boolean isReady() { return true; }
                @Override public void setWriteListener(WriteListener l) { throw new UnsupportedOperationException(); }
            };
        }
        return stream;
    }

    @Override
    public PrintWriter getWriter() {
        if (stream != null) throw new IllegalStateException("getOutputStream() was called");
        if (writer == null) {
            Charset cs = charset == null ? StandardCharsets.ISO_8859_1 : Charset.forName(charset);
            writer = new PrintWriter(new OutputStreamWriter(body, cs));
        }
        return writer;
    }
}
