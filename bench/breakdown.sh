#!/usr/bin/env bash
# Where a transaction's server time goes: runs the `handrolled`, `plpgsql`, `pg_idem` and `replay`
# scenarios (1 client, -M prepared) on a throwaway server with pg_stat_statements tracking
# nested statements too (track = all), so the statements pg_idem runs inside idem_claim and
# idem_complete show up beside the functions that run them; then measures what calling a
# SECURITY DEFINER function with a pinned search_path costs over a plain one.
#
#   bash bench/breakdown.sh [seconds per run, default 15]
#
# Needs the same as bench/run.py (a release build of pg_idem installed, pgbench, root or the
# postgres user). Prints markdown tables; numbers are mean server-side execution times in µs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/pg.sh

seconds="${1:-15}"
dir="$(mktemp -d /tmp/pg_idem_breakdown.XXXXXX)"
trap 'pg_stop "$dir"' EXIT
pg_start "$dir" \
    "shared_preload_libraries = 'pg_idem,pg_stat_statements'" \
    "pg_stat_statements.track = all" \
    "pg_stat_statements.max = 1000" \
    "shared_buffers = '1GB'" \
    "max_wal_size = '8GB'"

psql -qX -v ON_ERROR_STOP=1 -f bench/schema.sql
psql -qX -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION pg_stat_statements;
-- the same empty body twice: once plain, once as every pg_idem function is declared
CREATE FUNCTION bench_call_plain(a text, b text, c text) RETURNS int
LANGUAGE plpgsql AS $$BEGIN RETURN 1; END$$;
CREATE FUNCTION bench_call_definer(a text, b text, c text) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$BEGIN RETURN 1; END$$;
-- a small replay pool, filled through the real lifecycle
SET synchronous_commit = off;
DO $$
DECLARE f bigint;
BEGIN
  FOR i IN 1..20000 LOOP
    SELECT c.fence INTO f FROM idem_claim('t' || (i % 100 + 1), md5('replay/' || i)::uuid::text,
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c;
    PERFORM idem_complete('t' || (i % 100 + 1), md5('replay/' || i)::uuid::text, f, 200, '{"ok": true}');
    COMMIT;
  END LOOP;
END
$$;
-- only the table that has rows: an ANALYZE of the empty business tables would make the
-- first plans of their statements sequential scans, kept by -M prepared as the tables grow
VACUUM ANALYZE idem.keys;
SQL

calls="$dir/calls.sql"
cat >"$calls" <<'SQL'
SELECT bench_call_plain('t1', 'k', 'h');
SELECT bench_call_definer('t1', 'k', 'h');
SQL

report() {
    local title="$1"
    echo
    echo "### $title"
    echo
    psql -qXAt -F ' | ' <<'SQL'
SELECT '| µs/call | calls | top level | statement |';
SELECT '|---:|---:|:-:|---|';
SELECT '| ' || to_char(mean_exec_time * 1000, 'FM9990.0') || ' | ' || calls || ' | '
       || CASE WHEN toplevel THEN 'yes' ELSE '' END || ' | `'
       || left(regexp_replace(query, '\s+', ' ', 'g'), 110) || '` |'
  FROM pg_stat_statements
 WHERE calls >= 100 AND query !~* '^(BEGIN|END|COMMIT)'
 ORDER BY toplevel DESC, total_exec_time DESC
 LIMIT 14;
SQL
}

for scenario in handrolled plpgsql pg_idem replay; do
    psql -qXAt -c "SELECT pg_stat_statements_reset()" >/dev/null
    pgbench -n -M prepared -c 1 -T "$seconds" -D pool=20000 -f "bench/scenarios/$scenario.sql" >"$dir/$scenario.out" 2>&1 ||
        { cat "$dir/$scenario.out" >&2; exit 1; }
    report "$scenario ($(grep -Eo 'tps = [0-9.]+' "$dir/$scenario.out" | head -1))"
done

psql -qXAt -c "SELECT pg_stat_statements_reset()" >/dev/null
pgbench -n -M prepared -c 1 -T "$seconds" -f "$calls" >"$dir/calls.out" 2>&1 || { cat "$dir/calls.out" >&2; exit 1; }
report "an empty plpgsql function, plain and SECURITY DEFINER with SET search_path"
