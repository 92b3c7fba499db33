# shellcheck shell=bash
# Throwaway PostgreSQL servers for the demo, the runners and the benchmarks. Source this file.
#
#   pg_start DIR [postgresql.conf line]...   initdb DIR/data, start on a free port; exports
#                                            PGHOST PGPORT PGUSER PGDATABASE for psql, pgbench, ...
#   pg_stop DIR                              stop the server (fast) and remove DIR
#   pg_run CMD...                            run CMD as the server's OS user
#   pg_bouncer_start DIR PORT DBNAME POOL    a PgBouncer in transaction mode in front of PORT
#   sql_edition_file DIR                     writes the SQL edition into DIR and prints the path
#                                            of this version's install file (from the repository root)
#
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.

PG_BINDIR="${PG_BINDIR:-$("${PG_CONFIG:-pg_config}" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)}"
# Debian's pg_config lives in /usr/bin, not in the server's bin directory
if [ ! -x "$PG_BINDIR/initdb" ]; then
    PG_BINDIR="/usr/lib/postgresql/$("${PG_CONFIG:-pg_config}" --version | sed -E 's/[^0-9]*([0-9]+).*/\1/')/bin"
fi

# A RUST_BACKTRACE inherited by the server would append Rust backtraces to error details.
pg_run() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$@"
    else
        env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$@"
    fi
}

pg_free_port() {
    python3 - <<'PY'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

pg_start() {
    local dir="$1"
    shift
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    pg_run "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; return 1; }
    local port
    port="$(pg_free_port)"
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "fsync = on"
        for line in "$@"; do echo "$line"; done
    } | pg_run tee -a "$dir/data/postgresql.conf" >/dev/null
    pg_run "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { cat "$dir/server.log" >&2; return 1; }
    export PGHOST=127.0.0.1 PGPORT="$port" PGUSER=postgres PGDATABASE=postgres
}

pg_stop() {
    local dir="$1"
    if [ -f "$dir/data/postmaster.pid" ]; then
        pg_run "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 ||
            pg_run "$PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
    fi
    rm -rf "$dir"
}

# pg_bouncer_start DIR PORT DBNAME POOL_SIZE: a PgBouncer (Debian's pgbouncer) of its own in
# transaction mode, in DIR, on a free port of 127.0.0.1 and no Unix socket, in front of the
# server on PORT, serving DBNAME to the postgres user (trust); Debian's pgbouncer service (port
# 6432) is neither used nor disturbed. It ignores the startup parameter extra_float_digits, which
# JDBC (PgJDBC) always sends, as PgBouncer's FAQ advises. Sets BOUNCER_PORT and BOUNCER_PID (kill
# it when done).
pg_bouncer_start() {
    local dir="$1" port="$2" dbname="$3" pool_size="$4"
    mkdir -p "$dir"
    BOUNCER_PORT="$(pg_free_port)"
    echo '"postgres" ""' >"$dir/userlist.txt"
    # ignore_startup_parameters: lib/pq (Go) and JDBC send extra_float_digits at startup, which
    # PgBouncer refuses unless told to ignore it (the setting their users deploy with)
    printf '%s\n' \
        "[databases]" \
        "$dbname = host=127.0.0.1 port=$port dbname=$dbname" \
        "[pgbouncer]" \
        "listen_addr = 127.0.0.1" \
        "listen_port = $BOUNCER_PORT" \
        "unix_socket_dir =" \
        "auth_type = trust" \
        "auth_file = $dir/userlist.txt" \
        "pool_mode = transaction" \
        "ignore_startup_parameters = extra_float_digits" \
        "default_pool_size = $pool_size" \
        "max_client_conn = 400" \
        "ignore_startup_parameters = extra_float_digits" \
        "logfile = $dir/pgbouncer.log" >"$dir/pgbouncer.ini"
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres "$dir"
        # setpriv execs pgbouncer itself: $! is pgbouncer's pid
        setpriv --reuid=postgres --regid=postgres --init-groups "$(command -v pgbouncer)" -q "$dir/pgbouncer.ini" &
    else
        pgbouncer -q "$dir/pgbouncer.ini" &
    fi
    # shellcheck disable=SC2034 # the caller kills it
    BOUNCER_PID=$!
    local _
    for _ in $(seq 100); do
        psql -q -h 127.0.0.1 -p "$BOUNCER_PORT" -U postgres -d "$dbname" -c 'SELECT 1' >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$dir/pgbouncer.log" >&2
    return 1
}

sql_edition_file() {
    python3 scripts/sql_edition.py --out "$1" >/dev/null || return 1
    local version
    version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
    [ -f "$1/pg_idem--$version.sql" ] || { echo "sql_edition_file: no $1/pg_idem--$version.sql" >&2; return 1; }
    echo "$1/pg_idem--$version.sql"
}
