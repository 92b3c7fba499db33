#!/usr/bin/env bash
# What pg_idem.tenant_grants costs: the `pg_idem` scenario (claim + business INSERT + complete,
# fresh keys) run by a plain role (superusers skip the check) with the setting off and on, in
# alternating rounds on one throwaway server, so the ratio is taken under the same conditions.
#
#   bash bench/runners/tenant_grants.sh [seconds per run, default 10] [rounds, default 3] [clients, default 1]
#
# Needs a build of pg_idem installed (scripts/install.sh; release for meaningful numbers) and
# pgbench. Prints the TPS of each run and the median on/off ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/pg.sh

seconds="${1:-10}"
rounds="${2:-3}"
clients="${3:-1}"
dir="$(mktemp -d /tmp/pg_idem_grants.XXXXXX)"
trap 'pg_stop "$dir"' EXIT
pg_start "$dir" "shared_preload_libraries = 'pg_idem'" "shared_buffers = '512MB'" "max_wal_size = '8GB'"

psql -qX -v ON_ERROR_STOP=1 -f bench/scenarios/schema.sql
psql -qX -v ON_ERROR_STOP=1 <<'SQL'
CREATE ROLE bench_app LOGIN;
GRANT INSERT, SELECT ON payments TO bench_app;
-- the scenario's tenants t1..t100, and as many other tenants' grants again in the table
SELECT count(idem_grant_tenant('bench_app', 't' || g)) FROM generate_series(1, 100) AS g;
CREATE ROLE bench_other;
SELECT count(idem_grant_tenant('bench_other', 'other-' || g)) FROM generate_series(1, 10000) AS g;
SQL

tps() { # SETTING: one pgbench run as bench_app, prints its TPS
    PGOPTIONS="" psql -qX -c "ALTER ROLE bench_app SET pg_idem.tenant_grants = $1" >/dev/null
    psql -qX -c "TRUNCATE payments; TRUNCATE idem.keys; CHECKPOINT" >/dev/null
    pg_run "$PG_BINDIR/pgbench" -h "$PGHOST" -p "$PGPORT" -U bench_app -d "$PGDATABASE" -n -M prepared \
        -c "$clients" -j "$clients" -T "$seconds" -f bench/scenarios/pg_idem.sql 2>&1 |
        sed -nE 's/^tps = ([0-9.]+).*/\1/p'
}

ratios=()
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then off="$(tps off)"; on="$(tps on)"; else on="$(tps on)"; off="$(tps off)"; fi
    ratio="$(python3 -c "print(f'{$on / $off:.3f}')")"
    ratios+=("$ratio")
    echo "round $r: off $off tps, on $on tps, on/off $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print "median on/off TPS ratio: " a[int((NR + 1) / 2)] }'
