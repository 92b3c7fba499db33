#!/usr/bin/env bash
# Where a transaction's CPU goes, per step, from `perf record -a` with DWARF call chains: runs
# scenarios of bench/scenarios/ (pgbench -M prepared, fsync on unless told otherwise) on a
# throwaway server set up like bench/runners/run.py's, samples this server's processes and
# pgbench during the run (perf record -p), and prints CPU microseconds per transaction by step
# (bench/diagnostics/perf_steps.py: pg_idem's functions, the other executor work, commit,
# protocol and parsing, kernel network and scheduling, pgbench) and the hottest functions inside
# pg_idem's functions.
#
#   bash bench/diagnostics/perf.sh [seconds, default 10] [clients, default 1] [scenario writing payments ...] [-- NAME=VALUE ...]
#   e.g. bash bench/diagnostics/perf.sh 10 1 handrolled pg_idem inbox consume inbox_batch consume_batch
#        bash bench/diagnostics/perf.sh 8 8 inbox consume -- synchronous_commit=off
#        PERF_STACKS_DIR=/tmp/stacks bash bench/diagnostics/perf.sh 10 1 consume   # keeps the call stacks
#
# Needs perf (Debian: apt-get install linux-perf), root, a release build of pg_idem installed
# (scripts/install.sh), pgbench. The tables are truncated and a CHECKPOINT taken before every
# scenario, as bench/runners/run.py does. Sampling with call chains slows the server down:
# compare the steps of one run with each other, not its TPS with bench/runners/run.py's.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/pg.sh

seconds="${1:-10}"
clients="${2:-1}"
shift $(( $# >= 2 ? 2 : $# ))
scenarios=()
extra=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
    scenarios+=("$1"); shift
done
[ ${#scenarios[@]} -gt 0 ] || scenarios=(handrolled pg_idem inbox consume inbox_batch consume_batch)
conf=()
for kv in "${extra[@]}"; do conf+=("${kv%%=*} = '${kv#*=}'"); done

command -v perf >/dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 2; }
dir="$(mktemp -d /tmp/pg_idem_perf.XXXXXX)"
trap 'pg_stop "$dir"' EXIT
pg_start "$dir" \
    "shared_preload_libraries = 'pg_idem'" \
    "pg_idem.purge_interval = 0" \
    "shared_buffers = '2GB'" \
    "max_wal_size = '16GB'" \
    "min_wal_size = '1GB'" \
    "checkpoint_timeout = '30min'" \
    "${conf[@]}"
psql -qX -v ON_ERROR_STOP=1 -f bench/scenarios/schema.sql
so="$(pg_config --pkglibdir)/pg_idem.so"
echo "pg_idem.so: $(stat -c %s "$so") bytes, $(readelf -S "$so" | grep -q debug_info && echo debug || echo release); " \
     "$(psql -qXAt -c "SELECT string_agg(name || '=' || setting, ', ') FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')")"

for sc in "${scenarios[@]}"; do
    psql -qX -v ON_ERROR_STOP=1 -c "TRUNCATE payments, handrolled_keys, plpgsql_keys, processed_messages, idem.keys RESTART IDENTITY" -c "CHECKPOINT" >/dev/null
    # a short warm-up (plans, caches), then the recorded run
    pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? clients : 2 ))" -T 2 -f "bench/scenarios/$sc.sql" >/dev/null 2>&1
    # the recorded window lies inside the pgbench run; only this server's processes and pgbench
    # are sampled (other servers on the machine are `postgres` too); transactions in the window
    # from the payments identity (every scenario here writes 1 payment per message; 100
    # messages per transaction in the _batch scenarios)
    pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? clients : 2 ))" -T "$(( seconds + 3 ))" \
        -f "bench/scenarios/$sc.sql" >"$dir/$sc.out" 2>&1 &
    bench_pid=$!
    sleep 1.5
    pids="$(psql -qXAt -c "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE pid <> pg_backend_pid()"),$bench_pid"
    pids="$pids,$(cat "$dir/data/postmaster.pid" | head -1)"
    per_txn=1; case "$sc" in *_batch) per_txn=100 ;; esac
    c0="$(psql -qXAt -c "SELECT last_value FROM payments_id_seq")"
    perf record -q -p "$pids" -F 499 --call-graph dwarf,16384 -o "$dir/$sc.data" -- sleep "$seconds" 2>/dev/null
    c1="$(psql -qXAt -c "SELECT last_value FROM payments_id_seq")"
    wait "$bench_pid" || { cat "$dir/$sc.out" >&2; exit 1; }
    txns=$(( (c1 - c0) / per_txn ))
    tps="$(grep -Eo 'tps = [0-9.]+' "$dir/$sc.out" | head -1)"
    echo
    echo "### $sc, $clients client(s): $txns transactions in the $seconds s under perf (whole run: $tps)"
    echo
    # PERF_STACKS_DIR=DIR keeps each scenario's call stacks as text (DIR/SCENARIO.stacks), for
    # questions the step table does not answer (who calls a hot function)
    perf script -i "$dir/$sc.data" -F comm,pid,tid,ip,sym,dso --no-inline 2>/dev/null |
        tee ${PERF_STACKS_DIR:+"$PERF_STACKS_DIR/$sc.stacks"} |
        python3 bench/diagnostics/perf_steps.py --hz 499 --txns "$txns"
    rm -f "$dir/$sc.data"
done
