#!/usr/bin/env python3
"""Server time per statement of two scenarios, side by side (a diagnostic for bench/; standard library only).

    python3 bench/diagnostics/statement_times.py --pg 17 [--clients 1] [--rounds 4] [--duration 15] [inbox consume]
    python3 bench/diagnostics/statement_times.py --smoke     # the test command: 1 round x 2 s

Runs the scenarios of bench/scenarios/ (pgbench -M prepared) in alternating rounds (ABBA) on one
throwaway server set up like bench/runners/run.py's, with pg_stat_statements, tables truncated and a
CHECKPOINT before each run, and prints per run: TPS, each statement's mean execution time
(pg_stat_statements: CPU and waits inside the statement), and the WAL flushes' mean time per
transaction (pg_stat_wal's wal_sync_time / transactions). What a transaction spends outside
these (round trips, the client, the commit's own CPU) is TPS's business: at one client a gap in
TPS that the statements and the flush do not show is the machine's, not the statements'.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import SCENARIO_DIR, Server, log, median, use_pg  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pg")
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--smoke", action="store_true", help="the test command's run: --rounds 1 --duration 2")
    p.add_argument("scenarios", nargs="*", default=["inbox", "consume"])
    a = p.parse_args()
    if a.smoke:
        a.rounds, a.duration = 1, 2
    if len(a.scenarios) != 2:
        raise SystemExit("two scenarios, the reference first")
    if a.pg:
        use_pg(a.pg)
    server = Server(["shared_preload_libraries = 'pg_idem,pg_stat_statements'", "pg_idem.purge_interval = 0",
                     "shared_buffers = '512MB'", "max_wal_size = '16GB'", "checkpoint_timeout = '30min'",
                     "track_wal_io_timing = on"])
    tps: dict[str, list[float]] = {sc: [] for sc in a.scenarios}
    statement_us: dict[str, list[float]] = {sc: [] for sc in a.scenarios}
    try:
        server.start()
        server.execute((SCENARIO_DIR / "schema.sql").read_text())
        server.execute("CREATE EXTENSION pg_stat_statements;")
        for rnd in range(a.rounds):
            order = a.scenarios if rnd % 4 in (0, 3) else a.scenarios[::-1]
            for sc in order:
                server.execute("TRUNCATE payments, handrolled_keys, processed_messages, idem.keys RESTART IDENTITY;"
                               "CHECKPOINT;")
                server.execute("SELECT pg_stat_statements_reset(); SELECT pg_stat_reset_shared('wal');")
                res = subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", str(a.clients), "-j",
                                      str(min(a.clients, 2)), "-T", str(a.duration), "-f",
                                      str(SCENARIO_DIR / f"{sc}.sql")],
                                     capture_output=True, text=True, env=server.env)
                if res.returncode != 0:
                    raise SystemExit(res.stderr)
                t = float(next(line for line in res.stdout.splitlines() if "tps =" in line).split()[2])
                txns = float(next(line for line in res.stdout.splitlines()
                                  if "number of transactions actually processed" in line).split()[-1].split("/")[0])
                rows = server.rows("""
SELECT calls, round((mean_exec_time * 1000)::numeric, 1), left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
  FROM pg_stat_statements WHERE query !~* '^(begin|end|commit)' AND calls >= 100 ORDER BY query""")
                sync = float(server.value("SELECT wal_sync_time FROM pg_stat_wal"))
                tps[sc].append(t)
                statement_us[sc].append(sum(float(r[1]) * float(r[0]) for r in rows) / txns)
                log(f"round {rnd + 1} {sc}: {t:,.0f} TPS, WAL flush {sync * 1000 / txns:.1f} µs/txn")
                for calls, mean, query in rows:
                    log(f"    {mean:>7} µs x {int(calls) / txns:.2f}/txn  {query}")
    finally:
        server.stop()
    ref, other = a.scenarios
    ratios = [o / r for o, r in zip(tps[other], tps[ref])]
    log(f"{other} / {ref}: TPS {median(tps[other]) / median(tps[ref]):.2f}x (rounds "
        + ", ".join(f"{x:.2f}" for x in ratios) + "); statements per transaction "
        + f"{median(statement_us[other]):.1f} against {median(statement_us[ref]):.1f} µs (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
