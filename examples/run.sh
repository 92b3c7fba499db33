#!/usr/bin/env bash
# Runs the Python and Node.js examples end to end against a throwaway PostgreSQL server with
# pg_idem, and ends with "N passed, N failed" for both drivers together; exits 1 on any failure.
#
# Needs PostgreSQL with pg_idem installed, python3, and Node.js 20 with npm. Installs the
# examples' own dependencies (examples/python/.venv, examples/node/node_modules).
#
#   examples/run.sh            the examples connect to the server
#   examples/run.sh --pooler   through a PgBouncer (Debian's pgbouncer) of their own in
#                              transaction mode with 2 server connections, on a free port
set -euo pipefail

pooler=0
case "${1:-}" in
    --pooler) pooler=1 ;;
    "") ;;
    *) echo "usage: examples/run.sh [--pooler]" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../scripts/lib/pg.sh
source "$here/../scripts/lib/pg.sh"

tools=(python3 node npm psql)
[ "$pooler" = 1 ] && tools+=(pgbouncer)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 1; }
done

pgdir="$(mktemp -d)" # its own directory: pg_start hands it to the postgres user
logs="$(mktemp -d)"
pids=()

cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    pg_stop "$pgdir"
    rm -rf "$logs"
}
trap cleanup EXIT
# so that the EXIT trap runs on a signal too (after the command in the foreground ends)
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== installing dependencies"
venv="$here/python/.venv"
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    # Debian's python3 leaves ensurepip, which venv needs for pip, to the python3-venv package
    if ! python3 -c 'import ensurepip' 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/python/requirements.txt"
(cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)

echo "== starting PostgreSQL"
pg_start "$pgdir" "shared_preload_libraries = 'pg_idem'"
psql -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION IF NOT EXISTS pg_idem'

if [ "$pooler" = 1 ]; then
    echo "== starting PgBouncer (transaction mode)"
    pg_bouncer_start "$pgdir/pgbouncer" "$PGPORT" postgres 2
    pids+=("$BOUNCER_PID")
    bouncer_port="$BOUNCER_PORT"
    export PGPORT="$bouncer_port"
fi

# start_server NAME CMD...: starts an example server in the background and sets $url
start_server() {
    local name="$1" pid
    shift
    "$@" >"$logs/$name-server.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do
        url="$(grep -om1 'http://127\.0\.0\.1:[0-9]*' "$logs/$name-server.log" || true)"
        [ -n "$url" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "$name server did not start:" >&2
    cat "$logs/$name-server.log" >&2
    return 1
}

passed=0
failed=0

# run_driver NAME CMD...: runs a driver and adds its counts to the totals
run_driver() {
    local name="$1" rc=0 line p f
    local out="$logs/$name.out"
    shift
    timeout 60 "$@" 2>&1 | tee "$out" || rc=$?
    line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1 || true)"
    if [ -n "$line" ]; then
        read -r p _ f _ <<<"$line"
        passed=$((passed + p))
        failed=$((failed + f))
    fi
    if [ "$rc" != 0 ] && [ "${f:-0}" = 0 ]; then
        echo "$name driver exited with status $rc" >&2
        failed=$((failed + 1))
    fi
    if [ "$rc" != 0 ] && [ -f "$logs/$name-server.log" ]; then
        echo "-- last lines of the $name server's log:" >&2
        tail -n 30 "$logs/$name-server.log" >&2
    fi
}

echo "== python"
start_server python "$venv/bin/python" "$here/python/server.py" 0
run_driver python "$venv/bin/python" "$here/python/drive.py" "$url"

echo "== node"
start_server node node "$here/node/server.js" 0
run_driver node node "$here/node/drive.js" "$url"

echo "== python consumer"
run_driver python-consumer "$venv/bin/python" "$here/python/consumer.py"

echo "== node consumer"
run_driver node-consumer node "$here/node/consumer.js"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
