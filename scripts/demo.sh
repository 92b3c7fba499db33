#!/usr/bin/env bash
# The pg_idem demo: installs what is missing, builds and installs pg_idem (release), starts a
# throwaway PostgreSQL with it on a free local port, walks through claim, replay, mismatch, a
# concurrent in_progress, a takeover after lease expiry and a stale fence refused, then stops
# the server and removes it.
#
#   scripts/demo.sh              build in release mode (the first build takes several minutes)
#   scripts/demo.sh --debug      build in debug mode (faster to build)
#   scripts/demo.sh --pg 17      on PostgreSQL 17 (default: Debian's 15)
#   scripts/demo.sh --installed  use the pg_idem already installed (from a package), build nothing
#   scripts/demo.sh --installed --pg-bindir DIR
#                                the PostgreSQL whose binaries are in DIR, with the pg_idem
#                                installed there (the test command's package check: a copy of
#                                Debian's PostgreSQL 15 with the .deb's files in it)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

major=15
install_args=()
build=1
bindir=""
usage="usage: scripts/demo.sh [--debug] [--pg NN] [--installed [--pg-bindir DIR]]"
while [ $# -gt 0 ]; do
    case "$1" in
        --debug) install_args+=(--debug) ;;
        --pg) major="$2"; shift ;;
        --installed) build=0 ;;
        --pg-bindir) bindir="$2"; shift ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done

if [ -n "$bindir" ]; then
    [ "$build" = 0 ] || { echo "--pg-bindir goes with --installed" >&2; echo "$usage" >&2; exit 2; }
    [ -x "$bindir/pg_config" ] && [ -x "$bindir/postgres" ] || { echo "no PostgreSQL in $bindir" >&2; exit 2; }
    export PG_CONFIG="$bindir/pg_config" PATH="$bindir:$PATH" PG_BINDIR="$bindir"
else
    if [ "$build" = 1 ]; then
        scripts/setup.sh "$major"
    else
        ensure_pg "$major"
    fi
    use_pg "$major"
fi
if [ "$build" = 1 ]; then
    scripts/install.sh "${install_args[@]}"
fi

# shellcheck source=lib/pg.sh
source "$root/scripts/lib/pg.sh"
dir="$(mktemp -d /tmp/pg_idem_demo.XXXXXX)"
chmod 755 "$dir"
trap 'pg_stop "$dir/server"; rm -rf "$dir"' EXIT
pg_start "$dir/server" "shared_preload_libraries = 'pg_idem'" "pg_idem.purge_interval = '1s'"

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
sql() {
    printf '\033[2m  %s\033[0m\n' "$1"
    psql -X -q -v ON_ERROR_STOP=1 -P pager=off <<<"$1"
}
# value SQL: shows the statement and its one-line result; the result is left in $REPLY
value() {
    printf '\033[2m  %s\033[0m\n' "$1"
    REPLY="$(psql -X -q -At -F ' | ' -v ON_ERROR_STOP=1 -c "$1")"
    echo "  -> $REPLY"
}
fails() {
    printf '\033[2m  %s\033[0m\n' "$1"
    if psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose <<<"$1" 2>&1 | sed 's/^/  /'; [ "${PIPESTATUS[0]}" = 0 ]; then
        echo "expected an error" >&2
        exit 1
    fi
}

say "A throwaway server on 127.0.0.1:$PGPORT with pg_idem preloaded"
sql "CREATE EXTENSION pg_idem"
sql "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, idem_key text, amount numeric)"

say "1. A request arrives: claim its key, write the payment, store the response: one transaction"
sql "BEGIN;
SELECT outcome, fence, attempt FROM idem_claim('acme', 'order-1001', idem_request_hash('POST', '/payments', '{\"amount\": 42.00}')) \\gset
INSERT INTO payments (tenant, idem_key, amount) VALUES ('acme', 'order-1001', 42.00);
SELECT idem_complete('acme', 'order-1001', :fence, 201, '{\"payment_id\": 1, \"amount\": 42.00}');
COMMIT;"

say "2. The client timed out and retries: the stored response is replayed, nothing runs twice"
sql "SELECT outcome, response_code, response_body FROM idem_claim('acme', 'order-1001', idem_request_hash('post', '/payments', '{\"amount\":42.0}'))"
sql "SELECT count(*) AS payments FROM payments"

say "3. The same key with another payload is a client bug: mismatch (HTTP 422), nothing revealed"
sql "SELECT outcome, response_code, response_body FROM idem_claim('acme', 'order-1001', idem_request_hash('POST', '/payments', '{\"amount\": 4200}'))"

say "4. The same key under another tenant is another key"
sql "SELECT outcome, fence FROM idem_claim('globex', 'order-1001', 'h')"

say "5. Two retries at once: while the first is still in its transaction, the second gets in_progress at once (HTTP 409)"
psql -X -q -c "BEGIN; SELECT idem_claim('acme', 'order-1002', 'h'); SELECT pg_sleep(3); COMMIT;" >/dev/null &
first=$!
sleep 1
sql "SELECT outcome, clock_timestamp() - statement_timestamp() AS waited FROM idem_claim('acme', 'order-1002', 'h')"
wait "$first"

say "6. Lease mode: a worker claims with a 2 s lease, commits, calls an external API... and stalls"
value "SELECT outcome, fence, attempt FROM idem_claim('acme', 'job-7', 'h', lease => '2 seconds')"
old_fence="$(cut -d'|' -f2 <<<"$REPLY" | tr -d ' ')"
sql "SELECT idem_checkpoint('acme', 'job-7', $old_fence, 'charged', '{\"charge_id\": \"ch_123\"}')"
sleep 2.5
say "   Its lease has passed: the next claim takes the key over (attempt 2, a larger fence) and resumes from the checkpoint"
value "SELECT outcome, fence, attempt, checkpoint_phase, checkpoint_data FROM idem_claim('acme', 'job-7', 'h')"
new_fence="$(cut -d'|' -f2 <<<"$REPLY" | tr -d ' ')"

say "7. The stalled worker wakes up and completes with its old fence: refused (SQLSTATE 55000), and its business write rolls back with it"
fails "BEGIN; INSERT INTO payments (tenant, idem_key, amount) VALUES ('acme', 'job-7', 99); SELECT idem_complete('acme', 'job-7', $old_fence, 200); COMMIT;"
sql "SELECT count(*) AS payments_for_job_7 FROM payments WHERE idem_key = 'job-7'"

say "8. The new attempt completes under its fence, and the external call kept one idempotency key across both attempts"
sql "SELECT idem_complete('acme', 'job-7', $new_fence, 200, '{\"done\": true}') AS expires_at, idem_downstream_key('acme', 'job-7', 'charge') AS downstream_key"

say "9. What happened, from SQL"
sql "SELECT keys_in_progress, keys_completed, claims, replays_completed, in_progress, mismatches, takeovers, stale_fences FROM idem_stats()"
sql "SELECT database, state, total_passes FROM idem_purge_status()"

say "Done: the throwaway server is stopped and removed."
