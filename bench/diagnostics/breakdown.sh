#!/usr/bin/env bash
# Where a transaction's server time goes, per statement: runs scenarios of bench/scenarios/
# (1 client, -M prepared; default `replay`, `handrolled`, `pg_idem`, `inbox`, `consume`,
# `inbox_batch`, `consume_batch`) on a throwaway server with pg_stat_statements tracking nested
# statements too (track = all), so any statement a function runs shows up beside the function.
# Tables are truncated and a CHECKPOINT taken before every scenario (after `replay`, which runs
# first on a pool of completed keys), as bench/runners/run.py does. For CPU per step inside and
# around the functions, see bench/diagnostics/perf.sh.
#
#   bash bench/diagnostics/breakdown.sh [seconds per run, default 15] [scenario ...]
#
# Needs the same as bench/runners/run.py (a release build of pg_idem installed, pgbench, root or the
# postgres user). Prints markdown tables; numbers are mean server-side execution times in µs.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/pg.sh

seconds="${1:-15}"
shift $(( $# >= 1 ? 1 : 0 ))
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(replay handrolled pg_idem inbox consume inbox_batch consume_batch)
dir="$(mktemp -d /tmp/pg_idem_breakdown.XXXXXX)"
trap 'pg_stop "$dir"' EXIT
pg_start "$dir" \
    "shared_preload_libraries = 'pg_idem,pg_stat_statements'" \
    "pg_stat_statements.track = all" \
    "pg_stat_statements.max = 1000" \
    "shared_buffers = '1GB'" \
    "max_wal_size = '8GB'"

psql -qX -v ON_ERROR_STOP=1 -f bench/scenarios/schema.sql
psql -qX -v ON_ERROR_STOP=1 <<'SQL'
CREATE EXTENSION pg_stat_statements;
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

for scenario in "${scenarios[@]}"; do
    if [ "$scenario" != replay ]; then
        psql -qX -v ON_ERROR_STOP=1 -c "TRUNCATE payments, handrolled_keys, plpgsql_keys, processed_messages, idem.keys RESTART IDENTITY" -c "CHECKPOINT" >/dev/null
    fi
    psql -qXAt -c "SELECT pg_stat_statements_reset()" >/dev/null
    pgbench -n -M prepared -c 1 -T "$seconds" -D pool=20000 -f "bench/scenarios/$scenario.sql" >"$dir/$scenario.out" 2>&1 ||
        { cat "$dir/$scenario.out" >&2; exit 1; }
    report "$scenario ($(grep -Eo 'tps = [0-9.]+' "$dir/$scenario.out" | head -1))"
done
