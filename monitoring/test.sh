#!/usr/bin/env bash
# Tests the Prometheus monitoring of pg_idem with the real tools: promtool checks and unit-tests
# alerts.yml; then a throwaway PostgreSQL server with the installed pg_idem preloaded, a role
# that is a member of pg_monitor and nothing else, and Debian's postgres_exporter running as
# that role with postgres_exporter.yml (and, in a second exporter, the opt-in tenant file).
# It drives claims, replays, failures, in_progress conflicts, mismatches, a stale UUIDv7 key,
# a takeover after a short lease, refused stale fences, consumes, a stalled key and expired
# keys purged by the worker, then scrapes /metrics over HTTP and checks that every metric is
# there with its TYPE and moved by exactly what was driven; then a hot standby (no purge
# series), idem_stats_reset() and a server restart (the counters start again, counters_since
# moves). Ends with "N passed, N failed"; exits 1 on any failure.
#
# Needs PostgreSQL (PG_CONFIG or pg_config on PATH; scripts/test.sh runs it with 15) with
# pg_idem installed (scripts/install.sh --debug), python3 and curl. Installs Debian's
# prometheus-postgres-exporter and prometheus (for promtool) with apt-get when they are
# missing, without leaving their daemons running. Everything listens on 127.0.0.1 only.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../scripts/lib/pg.sh
source "$here/../scripts/lib/pg.sh"

exporter_bin=/usr/bin/prometheus-postgres-exporter
db=idem_monitoring
role=idem_monitor
work="$(mktemp -d /tmp/pg_idem_monitoring.XXXXXX)"
chmod 755 "$work"
pgdir="$work/pg"
pids=()
policy_created=""

cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    pg_stop "$pgdir"
    [ -n "$policy_created" ] && rm -f /usr/sbin/policy-rc.d
    rm -rf "$work"
}
trap cleanup EXIT
# so that the EXIT trap runs on a signal too
trap 'exit 130' INT
trap 'exit 143' TERM

passed=0
failed=0
ok() {
    passed=$((passed + 1))
    echo "ok   $*"
}
not_ok() {
    failed=$((failed + 1))
    echo "FAIL $*"
}
# check DESCRIPTION CMD...: passes when CMD succeeds
check() {
    local what="$1"
    shift
    if "$@"; then ok "$what"; else not_ok "$what"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ] && exit 0
    exit 1
}

# ---------------------------------------------------------------------------------------------
# The tools

# pids of running processes whose executable is one of the packages' daemons
daemon_pids() {
    local p exe
    for p in /proc/[0-9]*; do
        exe="$(readlink "$p/exe" 2>/dev/null)" || continue
        case "$exe" in
        /usr/bin/prometheus | /usr/bin/prometheus-postgres-exporter | /usr/bin/prometheus-node-exporter | /usr/bin/daemon)
            echo "${p#/proc/}" ;;
        esac
    done | sort
}

install_tools() {
    local missing=() before after pid
    [ -x "$exporter_bin" ] || missing+=(prometheus-postgres-exporter)
    command -v promtool >/dev/null || missing+=(prometheus)
    [ "${#missing[@]}" = 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "test.sh: ${missing[*]} missing; install them with apt-get (as root)" >&2
        return 1
    fi
    echo "== installing ${missing[*]}"
    # no daemon may start: a policy-rc.d that denies every start, unless one is there already
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        policy_created=1
    fi
    before="$(daemon_pids)"
    apt-get update -qq -o DPkg::Lock::Timeout=300 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o DPkg::Lock::Timeout=300 "${missing[@]}" >"$work/apt.log" 2>&1
    local rc=$?
    [ "$rc" = 0 ] || cat "$work/apt.log" >&2
    if [ -n "$policy_created" ]; then
        rm -f /usr/sbin/policy-rc.d
        policy_created=""
    fi
    # and whatever started anyway (an init system the policy does not cover) is stopped
    after="$(daemon_pids)"
    for pid in $(comm -13 <(echo "$before") <(echo "$after")); do
        echo "stopping process $pid ($(readlink "/proc/$pid/exe" 2>/dev/null)) that the packages started"
        kill "$pid" 2>/dev/null
    done
    return $rc
}

if ! install_tools; then
    not_ok "installing prometheus-postgres-exporter and prometheus"
    finish
fi
for tool in promtool curl python3 psql; do
    command -v "$tool" >/dev/null || { not_ok "$tool not found"; finish; }
done
echo "== $("$exporter_bin" --version 2>&1 | head -n 1)"
echo "== $(promtool --version 2>&1 | head -n 1)"

echo "== promtool"
check "promtool check rules alerts.yml" timeout 120 promtool check rules "$here/alerts.yml"
check "promtool test rules alerts_test.yml" timeout 300 promtool test rules "$here/alerts_test.yml"

# ---------------------------------------------------------------------------------------------
# The server, the role, the exporters

echo "== starting PostgreSQL ($PG_BINDIR)"
if ! pg_start "$pgdir" "shared_preload_libraries = 'pg_idem'" "pg_idem.database = '$db'" \
    "pg_idem.purge_interval = '1s'" "lc_messages = 'C'"; then
    not_ok "starting PostgreSQL"
    finish
fi
export PGDATABASE=$db
export PGCONNECT_TIMEOUT=10

# sql SQL...: runs statements as the superuser in the test database, prints tuples only
sql() {
    timeout 60 psql -qXAt -v ON_ERROR_STOP=1 -d "$db" "$@"
}
one() { sql -c "$1"; }

if ! { timeout 60 psql -qX -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db" &&
    sql -c "CREATE EXTENSION pg_idem" -c "CREATE ROLE $role LOGIN IN ROLE pg_monitor"; }; then
    not_ok "creating the database, the extension and the role"
    finish
fi
check "the monitoring role is a member of pg_monitor only, with no other attribute" \
    test "$(one "SELECT r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolbypassrls,
        (SELECT pg_catalog.string_agg(g.rolname, ',') FROM pg_catalog.pg_auth_members m
           JOIN pg_catalog.pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid)
        FROM pg_catalog.pg_roles r WHERE r.rolname = '$role'")" = "f|pg_monitor"

# start_exporter NAME QUERY_FILE: starts postgres_exporter as the monitoring role on a free port
# of 127.0.0.1; sets $url
start_exporter() {
    local name="$1" queries="$2" port pid
    port="$(pg_free_port)"
    DATA_SOURCE_NAME="host=127.0.0.1 port=$PGPORT user=$role dbname=$db sslmode=disable connect_timeout=10" \
        "$exporter_bin" --web.listen-address="127.0.0.1:$port" --extend.query-path="$queries" \
        --log.level=info >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    url="http://127.0.0.1:$port/metrics"
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        curl -sf --max-time 5 -o /dev/null "$url" && return 0
        sleep 0.1
    done
    echo "-- $name exporter did not answer:" >&2
    cat "$work/$name.log" >&2
    return 1
}

echo "== starting postgres_exporter as $role"
if ! start_exporter main "$here/postgres_exporter.yml"; then
    not_ok "starting postgres_exporter"
    finish
fi
main_url="$url"

# scrape FILE [URL]: fetches /metrics into FILE over HTTP, remembers when
last_scrape=0
scrape() {
    curl -sf --max-time 30 -o "$1" "${2:-$main_url}" || { echo "scrape of ${2:-$main_url} failed" >&2; : >"$1"; }
    last_scrape=$SECONDS
}
# scrape_fresh FILE: scrape once the exporter's cache of the key counts (cache_seconds of
# pg_idem_keys in postgres_exporter.yml) has run out since the last scrape
cache_seconds="$(awk '/^pg_idem_keys:/ { q = 1 } q && $1 == "cache_seconds:" { print $2; exit }' "$here/postgres_exporter.yml")"
wait_for_cache() {
    local wait=$((last_scrape + ${cache_seconds:-0} + 2 - SECONDS))
    if [ "$wait" -gt 0 ]; then
        echo "   (waiting ${wait}s for the exporter's cache of the key counts)"
        sleep "$wait"
    fi
}
scrape_fresh() {
    wait_for_cache
    scrape "$1"
}
# value FILE NAME [LABEL="value"]: the sample's value, empty when there is none
value() {
    awk -v name="$2" -v label="${3:-}" '
        /^#/ { next }
        {
            split($1, parts, "{")
            if (parts[1] != name) next
            if (label != "" && index($1, label) == 0) next
            print $2
            exit
        }' "$1"
}
# type_of FILE NAME: its "# TYPE" (counter, gauge)
type_of() { awk -v name="$2" '$1 == "#" && $2 == "TYPE" && $3 == name { print $4; exit }' "$1"; }
# num A OP B: a numeric comparison (awk: the exporter writes some values as 1.7e+09)
num() {
    [ -n "$1" ] && [ -n "$3" ] && awk -v a="$1" -v b="$3" -v op="$2" 'BEGIN {
        if (a == "NaN" || b == "NaN") exit 1
        a += 0; b += 0
        ok = (op == "==" && a == b) || (op == ">" && a > b) || (op == ">=" && a >= b) || (op == "<" && a < b) || (op == "<=" && a <= b)
        exit !ok }'
}
# expect FILE NAME TYPE OP VALUE [LABEL]: the metric exists with that TYPE and value
expect() {
    local file="$1" name="$2" type="$3" op="$4" want="$5" label="${6:-}" got t
    got="$(value "$file" "$name" "$label")"
    t="$(type_of "$file" "$name")"
    if [ "$t" = "$type" ] && num "$got" "$op" "$want"; then
        ok "$name${label:+{$label\}} $type = $got ($op $want)"
    else
        not_ok "$name${label:+{$label\}}: TYPE ${t:-none}, value ${got:-none}; expected TYPE $type, value $op $want"
    fi
}
# expect_delta BEFORE AFTER NAME TYPE DELTA [LABEL]: the counter moved by exactly DELTA
expect_delta() {
    local before="$1" after="$2" name="$3" type="$4" delta="$5" label="${6:-}" a b t d
    a="$(value "$before" "$name" "$label")"
    b="$(value "$after" "$name" "$label")"
    t="$(type_of "$after" "$name")"
    d="$(awk -v a="$a" -v b="$b" 'BEGIN { print b - a }')"
    if [ "$t" = "$type" ] && num "$a" '>=' 0 && num "$b" '>=' 0 && num "$d" == "$delta"; then
        ok "$name${label:+{$label\}} $type moved by $delta ($a -> $b)"
    else
        not_ok "$name${label:+{$label\}}: TYPE ${t:-none}, ${a:-none} -> ${b:-none}; expected TYPE $type, a move of $delta"
    fi
}

# check_idle_or_purging FILE: a running worker is idle or, at that instant, purging
check_idle_or_purging() {
    local st
    st="$(awk '/^pg_idem_purge_state_current\{/ && /state="(idle|purging)"/ { s += $2 } END { print s + 0 }' "$1")"
    check "pg_idem_purge_state_current: the worker is idle or purging (the two sum to $st)" test "$st" = 1
}

# ---------------------------------------------------------------------------------------------
# Before any traffic

# the launcher starts the database's purge worker once the database exists; wait for its first pass
for _ in $(seq 300); do
    [ "$(one "SELECT pid IS NOT NULL AND total_passes > 0 FROM idem_purge_status() WHERE database = '$db'")" = t ] && break
    sleep 0.1
done
echo "== baseline scrape"
scrape "$work/s0"
expect "$work/s0" pg_up gauge == 1
expect "$work/s0" pg_exporter_user_queries_load_error gauge == 0
expect "$work/s0" pg_exporter_last_scrape_error gauge == 0
expect "$work/s0" pg_idem_counters_available gauge == 1
# the counters count from when the postmaster set up shared memory (at its start, a moment
# before pg_postmaster_start_time() is recorded; again at a crash restart)
since_sql="SELECT pg_catalog.date_part('epoch', c.since) FROM public.idem_counters() AS c"
started="$(one "SELECT pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time())")"
expect "$work/s0" pg_idem_counters_since_timestamp_seconds gauge == "$(one "$since_sql")"
expect "$work/s0" pg_idem_purge_worker_up gauge == 1 "database=\"$db\""
expect "$work/s0" pg_idem_purge_interval_seconds gauge == 1 "database=\"$db\""
expect "$work/s0" pg_idem_purge_worker_starts_total counter == 1 "database=\"$db\""
expect "$work/s0" pg_idem_purge_passes_total counter '>=' 1 "database=\"$db\""
expect "$work/s0" pg_idem_purge_last_pass_timestamp_seconds gauge '>=' "$started" "database=\"$db\""
check_idle_or_purging "$work/s0"
expect "$work/s0" pg_idem_keys_in_progress gauge == 0

# pause purging, so that expired keys stay until they have been seen
sql -c "ALTER SYSTEM SET pg_idem.purge_interval = 0" -c "SELECT pg_catalog.pg_reload_conf()" >/dev/null
for _ in $(seq 100); do
    [ "$(one "SELECT state FROM idem_purge_status() WHERE database = '$db'")" = paused ] && break
    sleep 0.1
done

# ---------------------------------------------------------------------------------------------
# Traffic, each kind in a known amount (tenant "mon")

echo "== driving traffic"
drive_rc=0
# in lease mode with 1-second leases: t1 will be taken over, s1 will stay stalled; e1..e4
# expire after 1 second (claims: 6)
t_claims_from="$(date +%s.%N)"
sql >>"$work/traffic.log" 2>&1 <<'SQL' || drive_rc=1
SELECT outcome FROM idem_claim('mon', 't1', 'h', lease => '1 second');
SELECT outcome FROM idem_claim('mon', 's1', 'h', lease => '1 second');
SELECT idem_complete('mon', k, fence, 200) FROM
    (SELECT k, (SELECT fence FROM idem_claim('mon', k, 'h', ttl => '1 second')) AS fence
       FROM pg_catalog.unnest(ARRAY['e1', 'e2', 'e3', 'e4']) AS k) AS x;
SQL
t_claims_to="$(date +%s.%N)"
# 5 completed (claims: 5), 3 of them replayed; 1 failed (claims: 1) and replayed; 2 mismatches;
# p1 held (claims: 1) and 4 in_progress answers; a stale UUIDv7 key; 2 new messages and 1 duplicate
sql >>"$work/traffic.log" 2>&1 <<'SQL' || drive_rc=1
SELECT idem_complete('mon', k, fence, 201, '{"ok": true}') FROM
    (SELECT k, (SELECT fence FROM idem_claim('mon', k, 'h')) AS fence
       FROM pg_catalog.unnest(ARRAY['k1', 'k2', 'k3', 'k4', 'k5']) AS k) AS x;
SELECT outcome FROM idem_claim('mon', 'k1', 'h');
SELECT outcome FROM idem_claim('mon', 'k2', 'h');
SELECT outcome FROM idem_claim('mon', 'k3', 'h');
SELECT idem_fail_final('mon', 'f1', (SELECT fence FROM idem_claim('mon', 'f1', 'h')), 402);
SELECT outcome FROM idem_claim('mon', 'f1', 'h');
SELECT outcome FROM idem_claim('mon', 'k1', 'other');
SELECT outcome FROM idem_claim('mon', 'k2', 'other');
SELECT outcome FROM idem_claim('mon', 'p1', 'h', lease => '1 hour');
SELECT outcome FROM idem_claim('mon', 'p1', 'h');
SELECT outcome FROM idem_claim('mon', 'p1', 'h');
SELECT outcome FROM idem_claim('mon', 'p1', 'h');
SELECT outcome FROM idem_claim('mon', 'p1', 'h');
SET pg_idem.reject_stale_uuidv7 = on;
SELECT outcome FROM idem_claim('mon', '00000000-0000-7000-8000-000000000000', 'h');
RESET pg_idem.reject_stale_uuidv7;
SELECT idem_consume('mon', 'm1');
SELECT idem_consume('mon', 'm2');
SELECT idem_consume('mon', 'm1');
SQL
# the 1-second leases and ttls have passed: t1 is taken over (claims: 1, takeovers: 1); the old
# fence is refused twice (stale fences: 2), with its business write
sleep "$(date +%s.%N | awk -v to="$t_claims_to" '{ w = to + 1.5 - $1; printf "%.3f", (w > 0 ? w : 0) }')"
refused="$(sql <<'SQL' 2>&1
CREATE TABLE business (note text);
SELECT pg_catalog.set_config('mon.old_fence', fence::text, false) IS NOT NULL AS fence_saved
  FROM idem.keys WHERE tenant = 'mon' AND key = 't1';
SELECT outcome, attempt FROM idem_claim('mon', 't1', 'h');
DO $$
BEGIN
    INSERT INTO business VALUES ('zombie write');
    PERFORM idem_complete('mon', 't1', pg_catalog.current_setting('mon.old_fence')::bigint, 200);
    RAISE EXCEPTION 'not refused';
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'refused';
END $$;
DO $$
BEGIN
    PERFORM idem_checkpoint('mon', 't1', pg_catalog.current_setting('mon.old_fence')::bigint, 'late');
    RAISE EXCEPTION 'not refused';
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'refused';
END $$;
SELECT count(*) FROM business;
SQL
)" || drive_rc=1
check "the traffic ran" test "$drive_rc" = 0
[ "$drive_rc" = 0 ] || { cat "$work/traffic.log"; echo "$refused"; } >&2
check "the takeover answered claimed with attempt 2, the old fence was refused twice and its write rolled back" \
    test "$(echo "$refused" | tr '\n' ' ')" = "t claimed|2 NOTICE:  refused NOTICE:  refused 0 "

# ---------------------------------------------------------------------------------------------
# What the exporter shows

echo "== scrape after the traffic (purging paused)"
wait_for_cache
t_scrape_from="$(date +%s.%N)"
scrape "$work/s1"
t_scrape_to="$(date +%s.%N)"
# counters: exactly what was driven
expect_delta "$work/s0" "$work/s1" pg_idem_claims_total counter 14
expect_delta "$work/s0" "$work/s1" pg_idem_replays_completed_total counter 3
expect_delta "$work/s0" "$work/s1" pg_idem_replays_failed_total counter 1
expect_delta "$work/s0" "$work/s1" pg_idem_in_progress_total counter 4
expect_delta "$work/s0" "$work/s1" pg_idem_mismatches_total counter 2
expect_delta "$work/s0" "$work/s1" pg_idem_takeovers_total counter 1
expect_delta "$work/s0" "$work/s1" pg_idem_stale_fences_total counter 2
expect_delta "$work/s0" "$work/s1" pg_idem_stale_keys_total counter 1
expect_delta "$work/s0" "$work/s1" pg_idem_consumed_total counter 2
expect_delta "$work/s0" "$work/s1" pg_idem_consume_duplicates_total counter 1
expect_delta "$work/s0" "$work/s1" pg_idem_keys_purged_total counter 0
# keys: t1 (taken over), s1 (stalled), p1 in progress; k1..k5 and m1, m2 completed; f1 failed;
# e1..e4 expired
expect "$work/s1" pg_idem_keys_in_progress gauge == 3
expect "$work/s1" pg_idem_keys_stalled gauge == 1
expect "$work/s1" pg_idem_keys_completed gauge == 7
expect "$work/s1" pg_idem_keys_failed gauge == 1
expect "$work/s1" pg_idem_keys_expired gauge == 4
# the oldest attempt in progress was claimed after t_claims_from, and s1, in progress, before
# t_claims_to; the key counts ran during the scrape
age_min="$(awk -v a="$t_scrape_from" -v b="$t_claims_to" 'BEGIN { printf "%.6f", a - b }')"
age_max="$(awk -v a="$t_scrape_to" -v b="$t_claims_from" 'BEGIN { printf "%.6f", a - b }')"
expect "$work/s1" pg_idem_keys_oldest_in_progress_age_seconds gauge '>=' "$age_min"
expect "$work/s1" pg_idem_keys_oldest_in_progress_age_seconds gauge '<=' "$age_max"
expect "$work/s1" pg_idem_purge_state_current gauge == 1 'state="paused"'
expect "$work/s1" pg_idem_purge_state_current gauge == 0 'state="idle"'
expect "$work/s1" pg_idem_purge_interval_seconds gauge == 0 "database=\"$db\""
expect "$work/s1" pg_idem_purge_worker_up gauge == 1 "database=\"$db\""
expect "$work/s1" pg_exporter_last_scrape_error gauge == 0

# the opt-in tenant file, in a second exporter (0.11 takes one query file: the two concatenated)
echo "== the tenant metrics"
cat "$here/postgres_exporter.yml" "$here/postgres_exporter_tenants.yml" >"$work/queries_tenants.yml"
if start_exporter tenants "$work/queries_tenants.yml"; then
    curl -sf --max-time 30 -o "$work/t1" "$url" || : >"$work/t1"
    for m in claims:14 replays_completed:3 replays_failed:1 in_progress:4 mismatches:2 takeovers:1 \
        stale_fences:2 stale_keys:1 consumed:2 consume_duplicates:1; do
        expect "$work/t1" "pg_idem_tenant_${m%%:*}_total" counter == "${m##*:}" 'tenant="mon"'
    done
    for m in in_progress:3 completed:7 failed:1 stalled:1 expired:4; do
        expect "$work/t1" "pg_idem_tenant_keys_${m%%:*}" gauge == "${m##*:}" 'tenant="mon"'
    done
    expect "$work/t1" pg_idem_tenant_keys_oldest_in_progress_age_seconds gauge '>=' "$age_min" 'tenant="mon"'
    expect "$work/t1" pg_idem_claims_total counter '>=' 14
    expect "$work/t1" pg_exporter_last_scrape_error gauge == 0
else
    not_ok "starting the second postgres_exporter"
fi

echo "== purging again (pg_idem.purge_interval = 1s)"
sql -c "ALTER SYSTEM RESET pg_idem.purge_interval" -c "SELECT pg_catalog.pg_reload_conf()" >/dev/null
for _ in $(seq 200); do
    [ "$(one "SELECT total_keys FROM idem_purge_status() WHERE database = '$db'")" = 4 ] && break
    sleep 0.1
done
scrape_fresh "$work/s2"
expect_delta "$work/s1" "$work/s2" pg_idem_keys_purged_total counter 4
expect_delta "$work/s1" "$work/s2" pg_idem_purge_keys_total counter 4 "database=\"$db\""
expect "$work/s2" pg_idem_purge_passes_total counter '>' "$(value "$work/s1" pg_idem_purge_passes_total "database=\"$db\"")" "database=\"$db\""
expect "$work/s2" pg_idem_purge_batches_total counter '>' "$(value "$work/s1" pg_idem_purge_batches_total "database=\"$db\"")" "database=\"$db\""
expect "$work/s2" pg_idem_purge_last_pass_timestamp_seconds gauge '>' "$(value "$work/s1" pg_idem_purge_last_pass_timestamp_seconds "database=\"$db\"")" "database=\"$db\""
expect "$work/s2" pg_idem_purge_last_pass_timestamp_seconds gauge '>' "$(date +%s.%N | awk '{ printf "%.6f", $1 - 30 }')" "database=\"$db\""
expect "$work/s2" pg_idem_purge_last_pass_keys gauge '>=' 0 "database=\"$db\""
expect "$work/s2" pg_idem_purge_last_pass_batches gauge '>=' 1 "database=\"$db\""
expect "$work/s2" pg_idem_purge_last_pass_duration_seconds gauge '>=' 0 "database=\"$db\""
expect "$work/s2" pg_idem_purge_worker_started_timestamp_seconds gauge '>=' "$started" "database=\"$db\""
expect "$work/s2" pg_idem_purge_worker_starts_total counter == 1 "database=\"$db\""
expect "$work/s2" pg_idem_purge_interval_seconds gauge == 1 "database=\"$db\""
expect "$work/s2" pg_idem_keys_expired gauge == 0
check_idle_or_purging "$work/s2"
expect "$work/s2" pg_exporter_last_scrape_error gauge == 0

echo "== a hot standby (no purge worker runs there)"
sbdir="$work/standby"
mkdir -p "$sbdir"
[ "$(id -u)" = 0 ] && chown postgres "$sbdir"
sbport="$(pg_free_port)"
if pg_run timeout 120 "$PG_BINDIR/pg_basebackup" -h 127.0.0.1 -p "$PGPORT" -U postgres -D "$sbdir/data" -R -X stream -c fast \
    >"$work/basebackup.log" 2>&1 &&
    echo "port = $sbport" | pg_run tee -a "$sbdir/data/postgresql.auto.conf" >/dev/null &&
    pg_run "$PG_BINDIR/pg_ctl" -D "$sbdir/data" -l "$sbdir/server.log" -w -t 60 start >/dev/null &&
    primary_port="$PGPORT" && PGPORT="$sbport" start_exporter standby "$here/postgres_exporter.yml"; then
    curl -sf --max-time 30 -o "$work/sb1" "$url" || : >"$work/sb1"
    check "the standby is in recovery" test "$(PGPORT=$sbport one "SELECT pg_catalog.pg_is_in_recovery()")" = t
    expect "$work/sb1" pg_up gauge == 1
    expect "$work/sb1" pg_exporter_last_scrape_error gauge == 0
    expect "$work/sb1" pg_idem_counters_available gauge == 1
    expect "$work/sb1" pg_idem_keys_completed gauge == "$(value "$work/s2" pg_idem_keys_completed)"
    # no series that would make PgIdemPurgeWorkerDown fire on every standby
    check "no pg_idem_purge_* series from the standby" test -z "$(grep '^pg_idem_purge_' "$work/sb1")"
else
    not_ok "starting a standby and an exporter for it"
    cat "$work/basebackup.log" "$sbdir/server.log" 2>/dev/null | tail -n 20 >&2
fi
PGPORT="${primary_port:-$PGPORT}"
pg_stop "$sbdir"

echo "== counter reset (idem_stats_reset)"
one "SELECT pg_catalog.pg_sleep(1.1)" >/dev/null # so that counters_since moves by a second or more
reset_at="$(one "SELECT pg_catalog.date_part('epoch', pg_catalog.now()) FROM idem_stats_reset()")"
scrape "$work/s3"
expect "$work/s3" pg_idem_counters_since_timestamp_seconds gauge '>=' "$reset_at"
expect "$work/s3" pg_idem_counters_since_timestamp_seconds gauge '>' "$(value "$work/s2" pg_idem_counters_since_timestamp_seconds)"
expect "$work/s3" pg_idem_claims_total counter == 0
expect "$work/s3" pg_idem_keys_purged_total counter == 0

check "no error in the exporters' logs" test -z "$(grep -h 'level=error' "$work"/main.log "$work"/tenants.log 2>/dev/null)"

echo "== server restart"
one "SELECT outcome FROM idem_claim('mon', 'after-reset', 'h')" >/dev/null
scrape "$work/s3b"
expect "$work/s3b" pg_idem_claims_total counter == 1
if pg_run "$PG_BINDIR/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -m fast -w -t 60 restart >/dev/null; then
    # the exporter's first scrape after a restart fails on its pooled connection (pg_up 0, an
    # error in its log); the next one connects again
    for _ in $(seq 10); do
        scrape "$work/s4"
        [ "$(value "$work/s4" pg_up)" = 1 ] && break
        sleep 1
    done
    expect "$work/s4" pg_up gauge == 1
    expect "$work/s4" pg_idem_counters_since_timestamp_seconds gauge == "$(one "$since_sql")"
    expect "$work/s4" pg_idem_counters_since_timestamp_seconds gauge '>' "$(value "$work/s3" pg_idem_counters_since_timestamp_seconds)"
    expect "$work/s4" pg_idem_claims_total counter == 0
else
    not_ok "restarting PostgreSQL"
fi

# the second exporter's scrape holds every pg_idem metric of both files
awk '/^# (HELP|TYPE) pg_idem/ || /^pg_idem/' "$work/t1" >"$work/pg_idem.prom"
check "promtool check metrics: the pg_idem metrics follow Prometheus's naming conventions" \
    bash -c '[ -s "$1" ] && timeout 60 promtool check metrics <"$1"' _ "$work/pg_idem.prom"
[ "$failed" = 0 ] || { echo "-- exporter log:"; tail -n 20 "$work/main.log"; } >&2
finish
