#!/usr/bin/env python3
"""Where do new keys land after a pre-fill? A diagnostic for bench/scale.py (standard library only).

    python3 bench/fill_layout.py --pg 17 [--keys 100000] [--new 3000]

For idem.keys (pg_idem.sql) and handrolled_keys (handrolled.sql), UUIDv4 keys: fills the table
(a) through the real calls, one key per transaction (pgbench, scenarios/scale/*.sql), and (b) with
scale.py's INSERT ... SELECT pre-fill; then VACUUM, the free space map (pg_freespacemap: pages with
room for a narrow claim row plus the fillfactor reserve), and where the next --new real
transactions put their rows: into pages that existed before (an old page per insert means a block
read and a full-page image once the page is out of memory) or at the end of the heap.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run import Server, log, use_pg  # noqa: E402
import scale  # noqa: E402


def measure(server: Server, table: str, order_col: str, new: int, script: str, workdir: str) -> dict:
    server.execute(f"VACUUM (ANALYZE) {table}; CHECKPOINT;")
    pages = int(server.value(f"SELECT pg_relation_size('{table}') / 8192"))
    fsm = server.rows(f"""SELECT count(*) FILTER (WHERE avail >= 160), count(*) FILTER (WHERE avail >= 576),
                                  count(*) FILTER (WHERE avail >= 640), round(avg(avail))
                             FROM pg_freespace('{table}')""")[0]
    # exactly `new` transactions, one client: pgbench -t
    res = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "1", "-t", str(new), "-D", "kind=4",
                          "-f", str(scale.SCALE_DIR / script)], capture_output=True, text=True, env=server.env)
    if res.returncode != 0:
        raise SystemExit(res.stderr)
    landed = server.rows(f"""SELECT count(*) FILTER (WHERE (ctid::text::point)[0] < {pages}), count(*)
                               FROM (SELECT ctid FROM {table} ORDER BY {order_col} DESC LIMIT {new}) s""")[0]
    pages_after = int(server.value(f"SELECT pg_relation_size('{table}') / 8192"))
    return {"pages": pages, "fsm_pages_avail_ge_160": int(fsm[0]), "fsm_pages_avail_ge_576": int(fsm[1]),
            "fsm_pages_avail_ge_640": int(fsm[2]), "fsm_avg_avail": float(fsm[3] or 0),
            "new_rows": int(landed[1]), "new_rows_in_old_pages": int(landed[0]), "pages_after": pages_after}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pg")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--new", type=int, default=3000)
    a = p.parse_args()
    if a.pg:
        use_pg(a.pg)
    server = Server(["shared_preload_libraries = 'pg_idem'", "pg_idem.purge_interval = 0",
                     "shared_buffers = '512MB'", "max_wal_size = '4GB'"])
    workdir = tempfile.mkdtemp(prefix="fill_layout.")
    out = {}
    try:
        server.start()
        server.execute((BENCH_DIR / "schema.sql").read_text())
        server.execute((BENCH_DIR / "scale_schema.sql").read_text())
        server.execute("CREATE EXTENSION pg_freespacemap;")
        scale.templates(server)
        for sc, table, col in (("pg_idem", "idem.keys", "purge_after"), ("handrolled", "handrolled_keys", "expires_at")):
            for how in ("real calls", "INSERT ... SELECT pre-fill"):
                scale.truncate(server)
                if how == "real calls":
                    per = a.keys // 2
                    res = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "2", "-j", "2", "-t", str(per),
                                          "-D", "kind=4", "-f", str(scale.SCALE_DIR / f"{sc}.sql")],
                                         capture_output=True, text=True, env=server.env)
                    if res.returncode != 0:
                        raise SystemExit(res.stderr)
                else:
                    scale.fill_side(server, sc, 4, a.keys)
                m = measure(server, table, col, a.new, f"{sc}.sql", workdir)
                out[f"{table}, {how}"] = m
                log(f"{table:16} {how:28} {json.dumps(m)}")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
