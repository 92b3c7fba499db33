package io.github.pgidem.http;

import java.lang.System.Logger;
import java.lang.System.Logger.Level;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.LongAdder;

/**
 * The count of each outcome of {@code contract.outcomes} since this instance was made, and the
 * report of each through {@link System.Logger} (logger {@code io.github.pgidem.http}; by default
 * java.util.logging): {@code transaction_ended} at ERROR, {@code database_error} at WARNING, the
 * others at DEBUG. One instance belongs to each {@link IdempotencyFilter}.
 */
public final class Outcomes {
    private static final Logger LOG = System.getLogger("io.github.pgidem.http");
    private final Map<String, LongAdder> counts = new LinkedHashMap<>();

    Outcomes() {
        for (String name : Contract.strings("outcomes")) counts.put(name, new LongAdder());
    }

    /** Every outcome name of the contract with its count, in the contract's order. */
    public Map<String, Long> snapshot() {
        Map<String, Long> out = new LinkedHashMap<>();
        counts.forEach((name, n) -> out.put(name, n.sum()));
        return out;
    }

    /** The snapshot as a compact JSON object (what a {@code /_pg_idem/outcomes} route answers). */
    public String toJson() {
        return Json.write(snapshot());
    }

    void record(String outcome, String scopedKey, String detail) {
        LongAdder n = counts.get(outcome);
        if (n == null) throw new IllegalArgumentException("not an outcome of the contract: " + outcome);
        n.increment();
        Level level = outcome.equals("transaction_ended") ? Level.ERROR
                : outcome.equals("database_error") ? Level.WARNING : Level.DEBUG;
        if (LOG.isLoggable(level)) {
            LOG.log(level, "pg_idem outcome={0} key={1}{2}", outcome, scopedKey == null ? "-" : scopedKey,
                    detail == null ? "" : " " + detail);
        }
    }

    static List<String> names() {
        return Contract.strings("outcomes");
    }
}
