package io.github.pgidem.http;

import java.lang.reflect.Method;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;

/**
 * One statement of {@code contract.sql} made ready for JDBC: {@code {schema}} (and
 * {@code {fingerprint}}) replaced, each {@code $n} written as {@code ?} with the order of the
 * numbers kept, so that {@link #prepare} binds the contract's numbered arguments. Statements are
 * never prepared server-side by name (a transaction pooler would break): the driver's threshold
 * is set to 0 when it has one.
 */
final class Sql {
    final String text;
    private final int[] order;

    Sql(String template, String schema, String fingerprint) {
        String sql = template.replace("{fingerprint}", fingerprint == null ? "" : fingerprint).replace("{schema}", schema);
        StringBuilder out = new StringBuilder(sql.length());
        List<Integer> numbers = new ArrayList<>();
        boolean quoted = false;
        for (int i = 0; i < sql.length(); i++) {
            char c = sql.charAt(i);
            if (c == '\'') quoted = !quoted;
            if (!quoted && c == '$' && i + 1 < sql.length() && Character.isDigit(sql.charAt(i + 1))) {
                int j = i + 1;
                while (j < sql.length() && Character.isDigit(sql.charAt(j))) j++;
                numbers.add(Integer.parseInt(sql.substring(i + 1, j)));
                out.append('?');
                i = j - 1;
            } else {
                out.append(c);
            }
        }
        this.text = out.toString();
        this.order = numbers.stream().mapToInt(Integer::intValue).toArray();
    }

    Sql(String template, String schema) {
        this(template, schema, null);
    }

    /**
     * A statement with the arguments bound: {@code args[0]} is {@code $1}. Strings, byte arrays,
     * Integer, Long, String[] (text[]) and null (as an untyped text null) are understood.
     */
    PreparedStatement prepare(Connection conn, Object... args) throws SQLException {
        PreparedStatement st = conn.prepareStatement(text);
        try {
            unnamed(st);
            for (int i = 0; i < order.length; i++) {
                Object v = args[order[i] - 1];
                int at = i + 1;
                if (v == null) st.setNull(at, Types.VARCHAR);
                else if (v instanceof byte[]) st.setBytes(at, (byte[]) v);
                else if (v instanceof Integer) st.setInt(at, (Integer) v);
                else if (v instanceof Long) st.setLong(at, (Long) v);
                else if (v instanceof String[]) st.setArray(at, conn.createArrayOf("text", (Object[]) v));
                else st.setString(at, v.toString());
            }
            return st;
        } catch (SQLException | RuntimeException e) {
            st.close();
            throw e;
        }
    }

    /** PgJDBC's setPrepareThreshold(0), found by reflection so the driver stays the user's choice. */
    private static void unnamed(PreparedStatement st) {
        try {
            Class<?> pg = Class.forName("org.postgresql.PGStatement", false, st.getClass().getClassLoader());
            if (st.isWrapperFor(pg)) {
                Method m = pg.getMethod("setPrepareThreshold", int.class);
                m.invoke(st.unwrap(pg), 0);
            }
        } catch (ReflectiveOperationException | SQLException | RuntimeException ignored) {
            // another driver: nothing to turn off
        }
    }
}
