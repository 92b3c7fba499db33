#!/usr/bin/env python3
"""What the order of idem.keys' columns costs per key (a diagnostic for sql/schema.sql; standard library only).

    python3 bench/column_order.py --pg 17 [--keys 200000] [--fillfactor 100] [--layouts fresh]

The same calls into idem.keys on two fresh servers: one with idem.keys as a fresh install creates
it (a message row ends at its eighth column, its key, and the engine leaves the NULLs after it off)
and one in 0.4.0's order (CREATE EXTENSION pg_idem VERSION '0.1.0', then ALTER EXTENSION pg_idem
UPDATE: an update keeps the order it finds). On each, --keys request keys (scenarios/scale/pg_idem.sql:
idem_claim, the business INSERT, idem_complete) and then, the table truncated, --keys consumed
messages (scenarios/scale/consume.sql), UUIDv4 keys, 2 clients; after each, VACUUM, bytes per key of
the heap and of each index, and the stored tuples themselves (pageinspect): header size (t_hoff)
and length (lp_len) of the live ones, and the share of updates (idem_complete) that were HOT.
--fillfactor sets idem.keys' fillfactor before the calls (the table's own is 95); --layouts fresh
runs the fresh install's order only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run import Server, log, use_pg  # noqa: E402
import scale  # noqa: E402

# the frozen install script of the oldest release, from which the old order is reached by updates
RELEASED_SCRIPT = BENCH_DIR.parent / "sql" / "pg_idem--0.1.0.sql"


def install_released_script(server: Server) -> None:
    sharedir = subprocess.run(["pg_config", "--sharedir"], capture_output=True, text=True,
                              env=server.env, check=True).stdout.strip()
    target = Path(sharedir) / "extension" / RELEASED_SCRIPT.name
    if not target.exists() or target.read_bytes() != RELEASED_SCRIPT.read_bytes():
        shutil.copyfile(RELEASED_SCRIPT, target)


def measure(server: Server) -> dict:
    server.wait_for_clients_gone()
    upd, hot = server.rows("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                           "WHERE relid = 'idem.keys'::regclass")[0]
    server.execute("VACUUM (ANALYZE) idem.keys;")
    rows = int(server.value("SELECT count(*) FROM idem.keys"))
    heap = int(server.value("SELECT pg_relation_size('idem.keys')"))
    indexes = {name: int(size) / rows for name, size in server.rows(
        "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
        "WHERE indrelid = 'idem.keys'::regclass")}
    total = int(server.value("SELECT pg_total_relation_size('idem.keys')"))
    tuples = server.rows("""
SELECT round(avg(p.t_hoff), 1), round(avg(p.lp_len), 1), round(avg(p.t_infomask2 & 2047), 1)
  FROM generate_series(0, pg_relation_size('idem.keys') / 8192 - 1) AS b,
       heap_page_items(get_raw_page('idem.keys', b::int)) AS p
 WHERE p.lp_flags = 1""")[0]
    return {"rows": rows, "heap_per_key": round(heap / rows, 1),
            "indexes_per_key": {k: round(v, 1) for k, v in indexes.items()},
            "total_per_key": round(total / rows, 1), "avg_t_hoff": float(tuples[0]),
            "avg_tuple_bytes": float(tuples[1]), "avg_natts": float(tuples[2]),
            "hot_share_of_updates": round(int(hot) / int(upd), 4) if int(upd) else None}


def fill(server: Server, script: str, keys: int) -> None:
    res = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "2", "-j", "2", "-t", str(keys // 2),
                          "-D", "kind=4", "-f", str(scale.SCALE_DIR / script)],
                         capture_output=True, text=True, env=server.env)
    if res.returncode != 0:
        raise SystemExit(res.stderr)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pg")
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--fillfactor", type=int)
    p.add_argument("--layouts", default="fresh,updated", help="fresh, updated (default both)")
    a = p.parse_args()
    if a.pg:
        use_pg(a.pg)
    out = {}
    layouts = {"fresh": "fresh install", "updated": "updated from 0.4.0"}
    for layout in [layouts[name] for name in a.layouts.split(",")]:
        server = Server(["shared_preload_libraries = 'pg_idem'", "pg_idem.purge_interval = 0",
                         "shared_buffers = '512MB'", "max_wal_size = '4GB'"])
        try:
            server.start()
            if layout == "updated from 0.4.0":
                install_released_script(server)
                server.execute("CREATE EXTENSION pg_idem VERSION '0.1.0'; ALTER EXTENSION pg_idem UPDATE;")
            server.execute((BENCH_DIR / "schema.sql").read_text())
            server.execute((BENCH_DIR / "scale_schema.sql").read_text())
            server.execute("CREATE EXTENSION pageinspect;")
            if a.fillfactor:
                server.execute(f"ALTER TABLE idem.keys SET (fillfactor = {a.fillfactor});")
            order = server.value("SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute "
                                 "WHERE attrelid = 'idem.keys'::regclass AND attnum > 0 AND NOT attisdropped")
            log(f"{layout}: {order}")
            for kind, script in (("request keys", "pg_idem.sql"), ("consumed messages", "consume.sql")):
                scale.truncate(server)
                server.execute("SELECT pg_stat_reset_single_table_counters('idem.keys'::regclass);")
                fill(server, script, a.keys)
                m = measure(server)
                out[f"{layout}, {kind}"] = m
                log(f"{layout:20} {kind:18} {json.dumps(m)}")
        finally:
            server.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
