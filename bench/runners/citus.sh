#!/usr/bin/env bash
# pg_idem on a local Citus cluster next to one server, side by side in one run: what each way of
# reaching the keys costs. A coordinator and two worker nodes, and a single server, all on this
# machine (so the cluster is not faster here: it shows the cost of each path, not scale-out).
#
#   bash bench/runners/citus.sh [seconds per run, default 10] [rounds, default 3] [clients, default 4]
#
# Scenarios, each a transaction with a fresh key: idem_claim, the business INSERT, idem_complete
# (the `pg_idem` scenario of bench/scenarios, with the claim's record read as text):
#   single       one server, no Citus (the engine-level key store)
#   delegated    the cluster: `SELECT idem_claim(...)` through the coordinator; Citus runs the
#                whole call on the worker node holding the tenant (force_delegation, in the
#                transaction block), and the INSERT and idem_complete go to that node too
#   coordinator  the cluster: `SELECT (SELECT idem_claim(...))`, which Citus does not delegate:
#                the function runs on the coordinator and each of its statements is routed
# and the business INSERT alone on each (bare-single, bare-cluster) as the floor.
# Needs Citus in Debian's PostgreSQL 15 (../shared/citus/install.sh) and a build of pg_idem
# installed there (scripts/install.sh: release for meaningful numbers). Prints the TPS of every
# run, the median per scenario, and ratios taken within each round.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/pg.sh

seconds="${1:-10}"
rounds="${2:-3}"
clients="${3:-4}"
[ -f "$("${PG_CONFIG:-pg_config}" --pkglibdir)/citus.so" ] || {
    echo "bench/runners/citus.sh: Citus is not installed (../shared/citus/install.sh)" >&2
    exit 1
}
base="$(mktemp -d /tmp/pg_idem_citus_bench.XXXXXX)"
chmod 755 "$base"
nodes=(single coordinator worker1 worker2)
cleanup() { for n in "${nodes[@]}"; do pg_stop "$base/$n"; done; rm -rf "$base"; }
trap cleanup EXIT
declare -A port
conf=("shared_buffers = '256MB'" "max_wal_size = '4GB'" "max_connections = 200"
    "max_prepared_transactions = 100" "pg_idem.purge_interval = 0")
pg_start "$base/single" "shared_preload_libraries = 'pg_idem'" "${conf[@]}"
port[single]=$PGPORT
for n in coordinator worker1 worker2; do
    pg_start "$base/$n" "shared_preload_libraries = 'citus,pg_idem'" "${conf[@]}"
    port[$n]=$PGPORT
    psql -qX -p "${port[$n]}" -c "CREATE EXTENSION citus"
done
psql -qX -v ON_ERROR_STOP=1 -p "${port[coordinator]}" <<SQL >/dev/null
SELECT citus_set_coordinator_host('127.0.0.1', ${port[coordinator]});
SELECT citus_add_node('127.0.0.1', ${port[worker1]});
SELECT citus_add_node('127.0.0.1', ${port[worker2]});
SQL
schema="CREATE EXTENSION pg_idem;
CREATE TABLE payments (tenant text NOT NULL, idem_key text NOT NULL, amount_cents bigint NOT NULL,
    currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());"
psql -qX -v ON_ERROR_STOP=1 -p "${port[single]}" -c "$schema"
psql -qX -v ON_ERROR_STOP=1 -p "${port[coordinator]}" -c "$schema" \
    -c "SELECT idem_distribute()" \
    -c "SELECT create_distributed_table('payments', 'tenant', colocate_with => 'idem.keys')" >/dev/null

scripts="$base/scripts"
mkdir -p "$scripts"
cat >"$scripts/direct.sql" <<'SQL'
\set tenant random(1, 100)
\set amount random(100, 99999)
\set k random(1, 9000000000000000000)
BEGIN;
SELECT idem_claim('t' || :tenant, 'k' || :k, 'h') AS c \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency) VALUES ('t' || :tenant, 'k' || :k, :amount, 'EUR');
SELECT idem_complete('t' || :tenant, 'k' || :k, split_part(':c', ',', 2)::bigint, 201);
END;
SQL
cat >"$scripts/coordinator.sql" <<'SQL'
\set tenant random(1, 100)
\set amount random(100, 99999)
\set k random(1, 9000000000000000000)
BEGIN;
SELECT (SELECT idem_claim('t' || :tenant, 'k' || :k, 'h')) AS c \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency) VALUES ('t' || :tenant, 'k' || :k, :amount, 'EUR');
SELECT (SELECT idem_complete('t' || :tenant, 'k' || :k, split_part(':c', ',', 2)::bigint, 201));
END;
SQL
cat >"$scripts/bare.sql" <<'SQL'
\set tenant random(1, 100)
\set amount random(100, 99999)
\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO payments (tenant, idem_key, amount_cents, currency) VALUES ('t' || :tenant, 'k' || :k, :amount, 'EUR');
END;
SQL

tps() { # NODE SCRIPT: one pgbench run, prints its TPS (or its output, and fails)
    local out
    out="$(pg_run "$PG_BINDIR/pgbench" -h 127.0.0.1 -p "${port[$1]}" -U postgres -d postgres -n \
        -c "$clients" -j "$clients" -T "$seconds" -f "$scripts/$2.sql" 2>&1)"
    grep -qE '^tps = ' <<<"$out" || { echo "pgbench $1 $2 failed: $out" >&2; return 1; }
    sed -nE 's/^tps = ([0-9.]+).*/\1/p' <<<"$out"
}
scenarios=(single:single:direct delegated:coordinator:direct coordinator:coordinator:coordinator
    bare-single:single:bare bare-cluster:coordinator:bare)
declare -A runs
for r in $(seq 1 "$rounds"); do
    line="round $r:"
    for s in "${scenarios[@]}"; do
        IFS=: read -r name node script <<<"$s"
        t="$(tps "$node" "$script")"
        runs[$name]+="$t "
        line+=" $name $t"
    done
    echo "$line"
done
python3 - "$seconds" "$rounds" "$clients" \
    "${runs[single]}" "${runs[delegated]}" "${runs[coordinator]}" "${runs[bare-single]}" "${runs[bare-cluster]}" <<'PY'
import statistics, sys
seconds, rounds, clients = sys.argv[1:4]
names = ["single", "delegated", "coordinator", "bare-single", "bare-cluster"]
runs = {n: [float(x) for x in v.split()] for n, v in zip(names, sys.argv[4:])}
print(f"\n{rounds} rounds x {seconds} s, {clients} clients; TPS median (min-max)")
for n in names:
    v = runs[n]
    print(f"  {n:13} {statistics.median(v):8.0f}  ({min(v):.0f}-{max(v):.0f})")
def ratio(a, b):
    return statistics.median(x / y for x, y in zip(runs[a], runs[b]))
print("ratios, median of per-round ratios:")
print(f"  delegated / single        {ratio('delegated', 'single'):.2f}x")
print(f"  coordinator / single      {ratio('coordinator', 'single'):.2f}x")
print(f"  coordinator / delegated   {ratio('coordinator', 'delegated'):.2f}x")
print(f"  delegated / bare-cluster  {ratio('delegated', 'bare-cluster'):.2f}x")
print(f"  single / bare-single      {ratio('single', 'bare-single'):.2f}x")
PY
echo "where the claims ran (idem_cluster_counters: the coordinator scenario counts on the coordinator, the delegated one on the workers):"
psql -qX -p "${port[coordinator]}" -c "SELECT nodeport, claims FROM idem_cluster_counters()"
