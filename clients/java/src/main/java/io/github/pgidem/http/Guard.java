package io.github.pgidem.http;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;

/**
 * The connection the handler gets: the claim's connection, except that it cannot end the claim's
 * transaction through JDBC ({@code commit()}, {@code rollback()}, {@code setAutoCommit(..)},
 * {@code abort}) and {@code close()} does nothing (the filter owns it: code written for a pool's
 * connections closes what it borrowed). SQL {@code COMMIT} is caught later by the txid check.
 */
final class Guard implements InvocationHandler {
    private final Connection real;

    private Guard(Connection real) {
        this.real = real;
    }

    static Connection wrap(Connection real) {
        return (Connection) Proxy.newProxyInstance(Guard.class.getClassLoader(), new Class<?>[] {Connection.class},
                new Guard(real));
    }

    @Override
    public Object invoke(Object proxy, Method m, Object[] args) throws Throwable {
        String name = m.getName();
        boolean noArgs = args == null || args.length == 0;
        if ((name.equals("commit") && noArgs) || (name.equals("rollback") && noArgs)
                || name.equals("setAutoCommit") || name.equals("abort")) {
            throw new SQLException("pg_idem: the idempotency filter ends this transaction; " + name
                    + "() is refused (return a response instead)", "25000");
        }
        if (name.equals("close") && noArgs) return null;
        if (name.equals("isClosed") && noArgs) return real.isClosed();
        if (name.equals("unwrap") && Connection.class.isAssignableFrom((Class<?>) args[0])) {
            if (args[0] == Connection.class) return proxy;
            throw new SQLException("pg_idem: the claim's connection is not unwrapped", "25000");
        }
        if (name.equals("equals")) return proxy == args[0];
        if (name.equals("hashCode")) return System.identityHashCode(proxy);
        if (name.equals("toString")) return "pg_idem guarded " + real;
        try {
            return m.invoke(real, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
