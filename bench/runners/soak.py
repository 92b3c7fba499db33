#!/usr/bin/env python3
"""Steady-state soak: idem_consume with pg_idem's purge worker against the hand-written inbox with
its own clean-up job, side by side on one server, at a fixed rate, for half an hour (Python 3.11,
standard library only; see bench/README.md, "soak.py").

    python3 bench/runners/soak.py --smoke --pg 17     # < 1 minute; exits 1 on a failed sanity check
    python3 bench/runners/soak.py --pg 17             # 30 minutes, 300 messages/s per side, ttl 60 s

Both sides run at the same fixed rate (pgbench -R, bench/scenarios/scale/consume.sql and
inbox.sql, UUIDv4 message ids by default). Keys live for --ttl (pg_idem.ttl for idem_consume;
the clean-up job's age limit for processed_messages). pg_idem's purge worker runs every
--purge-interval; the hand-written side's clean-up job, as teams write it, deletes rows of
processed_messages older than the ttl in batches of --cleanup-batch (oldest first, through the
processed_at index), one transaction per batch, every --cleanup-every seconds. Every --sample
seconds the runner records each side's heap and index sizes, live and dead tuples, autovacuum
counts and purge lag (age of the oldest expired row still present); TPS and p99 per interval come
from pgbench's per-transaction logs. Writes OUT/report.md, OUT/results.json and SVG charts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import (BENCH_DIR, SCENARIO_DIR, BenchError, Server, calibrate, exit_status, interrupt_on_sigterm,  # noqa: E402
                 library_replaced, log, median, percentile, run_pgbench, stamp_end, use_pg)
from lib import charts  # noqa: E402
from lib.environment import environment  # noqa: E402

SCALE_DIR = SCENARIO_DIR / "scale"
SIDES = {"pg_idem": {"script": "consume.sql", "table": "idem.keys"},
         "hand-written": {"script": "inbox.sql", "table": "processed_messages"}}


def parse_interval_s(v: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|min)?\s*", v)
    if not m:
        raise ValueError(f"not an interval: {v!r} (use e.g. 60s, 500ms, 1min)")
    n = float(m.group(1))
    return n / 1000 if m.group(2) == "ms" else n * 60 if m.group(2) == "min" else n


# ------------------------------------------------------------------------------------------------
# The hand-written clean-up job
# ------------------------------------------------------------------------------------------------

class CleanupJob(threading.Thread):
    """Every `every` seconds: delete processed_messages older than the ttl, `batch` rows per
    transaction, oldest first, until a batch comes back short (a DO block with COMMIT per batch,
    as a cron job running psql would)."""

    def __init__(self, server: Server, ttl_s: float, every: float, batch: int):
        super().__init__(daemon=True)
        self.server, self.ttl_s, self.every, self.batch = server, ttl_s, every, batch
        self.stop_event = threading.Event()
        self.ticks = []          # (epoch at start, rows deleted, seconds)
        self.errors: list[str] = []

    def run(self) -> None:
        sql = f"""
DO $do$
DECLARE n bigint; total bigint := 0; t0 timestamptz := clock_timestamp();
BEGIN
  LOOP
    DELETE FROM processed_messages
     WHERE (subscriber_id, message_id) IN (
           SELECT subscriber_id, message_id FROM processed_messages
            WHERE processed_at < localtimestamp - interval '{self.ttl_s} seconds'
            ORDER BY processed_at
            LIMIT {self.batch});
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    COMMIT;
    EXIT WHEN n < {self.batch};
  END LOOP;
  RAISE NOTICE 'CLEANUP % %', total, extract(epoch FROM clock_timestamp() - t0);
END
$do$;"""
        while not self.stop_event.is_set():
            t0 = time.time()
            try:
                err = self.server.execute(sql, timeout=600)
                m = re.search(r"CLEANUP (\d+) ([0-9.]+)", err)
                if m:
                    self.ticks.append((t0, int(m.group(1)), float(m.group(2))))
            except (BenchError, subprocess.TimeoutExpired) as e:
                self.errors.append(str(e)[:500])
            self.stop_event.wait(max(0.0, self.every - (time.time() - t0)))

    def finish(self) -> None:
        self.stop_event.set()
        self.join()


# ------------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------------

def sample(server: Server, ttl_s: float) -> dict:
    s = {"t": time.time()}
    for side, spec in SIDES.items():
        t = spec["table"]
        row = server.rows(f"""
SELECT pg_relation_size('{t}'), pg_table_size('{t}'), pg_indexes_size('{t}'),
       st.n_live_tup, st.n_dead_tup, st.autovacuum_count, st.autoanalyze_count, st.n_tup_ins, st.n_tup_del,
       coalesce(extract(epoch FROM st.last_autovacuum), 0)
  FROM pg_stat_user_tables st WHERE st.relid = '{t}'::regclass""")[0]
        d = dict(zip(["heap", "table", "indexes", "live", "dead", "autovacuum", "autoanalyze", "ins", "del",
                      "last_autovacuum"], [float(x) for x in row]))
        d["index"] = {r[0]: int(r[1]) for r in server.rows(
            f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            f"WHERE indrelid = '{t}'::regclass ORDER BY 1")}
        if t == "idem.keys":
            lag, n = server.rows("""
SELECT coalesce(extract(epoch FROM now() - min(coalesce(expires_at, purge_after))), 0), count(*)
  FROM idem.keys WHERE purge_after < now() AND coalesce(expires_at, purge_after) < now()""")[0]
        else:
            lag, n = server.rows(f"""
SELECT coalesce(extract(epoch FROM (localtimestamp - interval '{ttl_s} seconds') - min(processed_at)), 0), count(*)
  FROM processed_messages WHERE processed_at < localtimestamp - interval '{ttl_s} seconds'""")[0]
        d["lag_s"], d["expired_present"] = float(lag), int(n)
        # the real row count next to n_live_tup: the statistics count only what backends report
        d["rows"] = int(server.value(f"SELECT count(*) FROM {t}"))
        s[side] = d
    st = server.rows("SELECT total_passes, total_keys, coalesce(last_pass_keys, 0), coalesce(last_pass_ms, 0), state "
                     "FROM idem_purge_status() WHERE database = current_database()")
    if st:
        s["purge"] = {"passes": int(st[0][0]), "keys": int(st[0][1]), "last_pass_keys": int(st[0][2]),
                      "last_pass_ms": int(st[0][3]), "state": st[0][4]}
    s["lsn"] = int(float(server.value("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")))
    return s


def interval_stats(records: list[tuple[float, int]], t0: float, t1: float) -> tuple[float, float | None]:
    lat = sorted(us for end, us in records if t0 <= end < t1)
    tps = len(lat) / max(1e-9, t1 - t0)
    return tps, (percentile(lat, 99) / 1000.0 if lat else None)


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def mib(x):
    return x / 2**20


def summarize(results: dict) -> dict:
    samples = results["samples"]
    out = {}
    if len(samples) < 4:
        return out
    n = len(samples)
    half = samples[n // 2:]
    for side in SIDES:
        tot = [s[side]["table"] + s[side]["indexes"] for s in samples]
        h = [s[side]["table"] + s[side]["indexes"] for s in half]
        t = [s["t_rel"] for s in half]
        # least-squares slope over the second half, bytes per minute
        mt, mh = sum(t) / len(t), sum(h) / len(h)
        var = sum((x - mt) ** 2 for x in t) or 1e-9
        slope = sum((x - mt) * (y - mh) for x, y in zip(t, h)) / var * 60
        out[side] = {
            "size_at_half_mib": mib(h[0]), "size_end_mib": mib(tot[-1]), "size_max_mib": mib(max(tot)),
            "size_second_half_min_mib": mib(min(h)), "size_second_half_max_mib": mib(max(h)),
            "growth_second_half_pct": (h[-1] - h[0]) / max(1, h[0]) * 100,
            "slope_second_half_mib_per_min": mib(slope),
            "heap_end_mib": mib(samples[-1][side]["heap"]),
            "index_end_mib": {k: mib(v) for k, v in samples[-1][side]["index"].items()},
            "live_end": samples[-1][side]["live"], "dead_end": samples[-1][side]["dead"],
            "rows_end": samples[-1][side].get("rows"),
            "rows_second_half_max": max(s[side].get("rows", 0) for s in half),
            "n_tup_del": samples[-1][side]["del"] - samples[0][side]["del"],
            "dead_max": max(s[side]["dead"] for s in samples),
            "autovacuum_runs": samples[-1][side]["autovacuum"] - samples[0][side]["autovacuum"],
            "lag_median_s": median([s[side]["lag_s"] for s in half]),
            "lag_max_s": max(s[side]["lag_s"] for s in samples),
            "expired_present_max": max(s[side]["expired_present"] for s in samples),
            "tps_median": median([s[side].get("tps") for s in half]),
            "p99_median_ms": median([s[side].get("p99_ms") for s in half]),
            "p99_max_ms": max((s[side].get("p99_ms") or 0) for s in samples),
        }
    return out


def write_charts(out: Path, results: dict) -> list[str]:
    S = results["samples"]
    col = {"pg_idem": "#4c78a8", "hand-written": "#f58518"}
    label = {"pg_idem": "pg_idem (idem.keys, purge worker)", "hand-written": "hand-written (processed_messages, clean-up job)"}
    files = []
    series = []
    for side in SIDES:
        series.append({"name": f"{label[side]}: heap + indexes", "color": col[side], "marker": False,
                       "points": [(s["t_rel"] / 60, mib(s[side]["table"] + s[side]["indexes"])) for s in S]})
        series.append({"name": f"{label[side]}: heap", "color": col[side], "dash": "6,4", "marker": False,
                       "points": [(s["t_rel"] / 60, mib(s[side]["heap"])) for s in S]})
    (out / "soak_size.svg").write_text(charts.line_chart(
        "Soak: table size over time", series, "minutes", "MiB (pg_table_size + pg_indexes_size)",
        note=f"sampled every {results['args']['sample']:g} s"))
    files.append("soak_size.svg")
    series = [{"name": label[side], "color": col[side], "marker": False,
               "points": [(s["t_rel"] / 60, s[side].get("tps")) for s in S[1:]]} for side in SIDES]
    (out / "soak_tps.svg").write_text(charts.line_chart(
        "Soak: transactions per second per sample interval", series, "minutes", "TPS",
        note=f"fixed rate {results['args']['rate']:g}/s per side (pgbench -R)"))
    files.append("soak_tps.svg")
    series = [{"name": label[side], "color": col[side], "marker": False,
               "points": [(s["t_rel"] / 60, s[side].get("p99_ms")) for s in S[1:]]} for side in SIDES]
    (out / "soak_p99.svg").write_text(charts.line_chart(
        "Soak: p99 latency per sample interval", series, "minutes", "ms (pgbench latency incl. schedule lag)"))
    files.append("soak_p99.svg")
    series = []
    for side in SIDES:
        series.append({"name": f"{label[side]}: purge lag (s)", "color": col[side], "marker": False,
                       "points": [(s["t_rel"] / 60, s[side]["lag_s"]) for s in S]})
    (out / "soak_lag.svg").write_text(charts.line_chart(
        "Soak: purge lag (age of the oldest expired row still present)", series, "minutes", "seconds"))
    files.append("soak_lag.svg")
    series = [{"name": f"{label[side]}: n_dead_tup", "color": col[side], "marker": False,
               "points": [(s["t_rel"] / 60, s[side]["dead"]) for s in S]} for side in SIDES]
    (out / "soak_dead.svg").write_text(charts.line_chart(
        "Soak: dead tuples (pg_stat_user_tables.n_dead_tup)", series, "minutes", "rows"))
    files.append("soak_dead.svg")
    return files


def render(out: Path, results: dict) -> None:
    files = write_charts(out, results) if results.get("samples") else []
    a = results["args"]
    env = results.get("environment", {})
    so = env.get("pg_idem_so", {})
    summ = results.get("summary", {})
    L = [f"# pg_idem soak: {results.get('mode')} run", ""]
    L.append(f"`{results.get('command')}`, {results.get('started_at')} to {results.get('finished_at')} "
             f"({(results.get('elapsed_s') or 0) / 60:.1f} min).")
    L.append("")
    L.append(f"- PostgreSQL: {env.get('postgres', 'n/a')}")
    L.append(f"- pg_idem {env.get('pg_idem_version', '?')}: {so.get('bytes', '?')} bytes, {so.get('profile_guess', '?')}, built {so.get('mtime', '?')}")
    L.append(f"- machine: {env.get('cpus')} CPUs, {env.get('memory_gib')} GiB RAM")
    L.append("- settings: " + ", ".join(f"`{k} = {v}`" for k, v in env.get("settings", {}).items()
                                        if k in ("shared_buffers", "shared_preload_libraries", "fsync", "synchronous_commit",
                                                 "pg_idem.purge_interval", "pg_idem.purge_batch_size", "autovacuum")))
    L.append(f"- load: `pgbench -M prepared -R {a['rate']:g} -c {a['clients']}` per side, at the same time, "
             f"for {a['minutes']:g} min: pg_idem `scenarios/scale/consume.sql`, hand-written `scenarios/scale/inbox.sql` "
             f"(UUIDv{a['kind']} message ids, each message with its business INSERT into `payments`)")
    L.append(f"- ttl {a['ttl']}: `pg_idem.ttl` for idem_consume; the clean-up job deletes processed_messages "
             f"older than that. pg_idem: `pg_idem.purge_interval = {a['purge_interval']}` (batches of "
             f"`purge_batch_size`, paced by `purge_max_rate`, defaults). Hand-written: every {a['cleanup_every']:g} s "
             f"`DELETE ... WHERE (subscriber_id, message_id) IN (SELECT ... WHERE processed_at < localtimestamp - ttl "
             f"ORDER BY processed_at LIMIT {a['cleanup_batch']})`, one transaction per batch, until a batch is short; "
             f"processed_messages has default autovacuum settings, idem.keys pg_idem's own (scale factor 0.02)")
    L.append(f"- samples every {a['sample']:g} s: sizes (`pg_relation_size` of heap and each index, "
             f"`pg_table_size`, `pg_indexes_size`), `pg_stat_user_tables`, purge lag; TPS and p99 per interval "
             f"from pgbench's per-transaction logs (latency under -R includes the schedule lag)")
    noise = results.get("noise", {})
    if noise:
        L.append(f"- noise: other CPU {noise.get('other_cpu', 0) * 100:.0f}% and steal {noise.get('steal', 0) * 100:.0f}% "
                 f"over the whole load (the larger of the two pgbench runs'), CPU calibration {noise.get('cal_before_ms', 0):.0f} ms "
                 f"before and {noise.get('cal_after_ms', 0):.0f} ms after" + (f"; other processes: {', '.join(noise.get('other_top', []))}" if noise.get('other_top') else ""))
    L.append("")
    if summ:
        L.append("## Steady state (second half of the run)")
        L.append("")
        L.append("| | pg_idem | hand-written |")
        L.append("|---|---:|---:|")
        rows = [("size (heap + indexes) at half time, MiB", "size_at_half_mib", 1),
                ("size at the end, MiB", "size_end_mib", 1),
                ("size, second half min-max, MiB", None, 1),
                ("growth over the second half", "growth_second_half_pct", 1),
                ("slope over the second half, MiB/min (least squares)", "slope_second_half_mib_per_min", 3),
                ("heap at the end, MiB", "heap_end_mib", 1),
                ("rows at the end (count(*))", "rows_end", 0),
                ("rows, max over the second half (count(*))", "rows_second_half_max", 0),
                ("live rows at the end (n_live_tup)", "live_end", 0),
                ("deleted rows reported to the statistics (n_tup_del)", "n_tup_del", 0),
                ("dead rows at the end / max (n_dead_tup)", None, 0),
                ("autovacuum runs", "autovacuum_runs", 0),
                ("purge lag, median of second half / max, s", None, 1),
                ("expired rows present, max", "expired_present_max", 0),
                ("TPS per interval, median of second half", "tps_median", 1),
                ("p99 per interval, median of second half / max, ms", None, 2)]
        for name, key, nd in rows:
            cells = []
            for side in SIDES:
                m = summ.get(side, {})
                if name.startswith("size, second half"):
                    cells.append(f"{m.get('size_second_half_min_mib', 0):.1f}-{m.get('size_second_half_max_mib', 0):.1f}")
                elif name.startswith("dead rows"):
                    cells.append(f"{m.get('dead_end', 0):,.0f} / {m.get('dead_max', 0):,.0f}")
                elif name.startswith("purge lag"):
                    cells.append(f"{m.get('lag_median_s') or 0:.1f} / {m.get('lag_max_s', 0):.1f}")
                elif name.startswith("p99"):
                    cells.append(f"{m.get('p99_median_ms') or 0:.2f} / {m.get('p99_max_ms', 0):.2f}")
                elif key == "growth_second_half_pct":
                    cells.append(f"{m.get(key, 0):+.1f}%")
                else:
                    v = m.get(key)
                    cells.append("n/a" if v is None else f"{v:,.{nd}f}")
            L.append(f"| {name} | {cells[0]} | {cells[1]} |")
        L.append("")
        for side in SIDES:
            idx = summ.get(side, {}).get("index_end_mib", {})
            L.append(f"- {side} indexes at the end: " + ", ".join(f"{k} {v:.1f} MiB" for k, v in idx.items()))
        pj = results.get("purge_end", {})
        cl = results.get("cleanup", {})
        L.append(f"- purge worker: {pj.get('passes', 0)} passes, {pj.get('keys', 0):,} keys deleted during the run")
        pc = results.get("purge_stats_check")
        if pc:
            b, e = pc["before_exit"], pc["after_exit"]
            L.append(f"- the purge worker's deletions in the statistics: `n_tup_del` of idem.keys {b['n_tup_del']:,} "
                     f"(n_live_tup {b['n_live_tup']:,}, n_dead_tup {b['n_dead_tup']:,}) while it ran; after "
                     f"`pg_terminate_backend` of the worker ({pc['terminated']} process), 3 s later: {e['n_tup_del']:,} "
                     f"(n_live_tup {e['n_live_tup']:,}, n_dead_tup {e['n_dead_tup']:,}); it had deleted "
                     f"{pc['purge_worker_keys'] or 0:,} keys")
        L.append(f"- clean-up job: {cl.get('ticks', 0)} runs, {cl.get('deleted', 0):,} rows deleted, "
                 f"{cl.get('seconds_median', 0) * 1000:.0f} ms median per run (max {cl.get('seconds_max', 0) * 1000:.0f} ms)")
        L.append("")
    for f in files:
        L.append(f"![{f}]({f})")
        L.append("")
    L.append("## Samples")
    L.append("")
    L.append("| min | pg_idem MiB (heap) | rows | n_live_tup | n_dead_tup | autovac | lag s | TPS | p99 ms "
             "| hand MiB (heap) | rows | n_live_tup | n_dead_tup | autovac | lag s | TPS | p99 ms |")
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in results.get("samples", []):
        cells = [f"{s['t_rel'] / 60:.1f}"]
        for side in SIDES:
            d = s[side]
            cells += [f"{mib(d['table'] + d['indexes']):.1f} ({mib(d['heap']):.1f})", f"{d.get('rows', 0):,}",
                      f"{d['live']:,.0f}", f"{d['dead']:,.0f}",
                      f"{d['autovacuum']:.0f}", f"{d['lag_s']:.1f}", f"{d.get('tps') or 0:.0f}",
                      f"{d['p99_ms']:.2f}" if d.get("p99_ms") is not None else "n/a"]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("## Problems")
    L.append("")
    L += [f"- {p}" for p in results.get("problems", [])] or ["none: every sanity check passed"]
    L.append("")
    (out / "report.md").write_text("\n".join(L) + "\n")


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="steady-state soak: idem_consume + purge worker vs the hand-written inbox + clean-up job")
    p.add_argument("--smoke", action="store_true", help="40 s, ttl 5 s, purge every 1 s (< 1 min)")
    p.add_argument("--pg", help="PostgreSQL major version (pg_idem installed into it)")
    p.add_argument("--out", help="output directory (default bench/out/soak)")
    p.add_argument("--minutes", type=float, help="length of the load (default 30)")
    p.add_argument("--rate", type=float, help="messages per second per side, pgbench -R (default 300)")
    p.add_argument("--clients", type=int, default=2, help="pgbench clients per side (default 2)")
    p.add_argument("--ttl", help="how long keys are kept (default 60s)")
    p.add_argument("--purge-interval", help="pg_idem.purge_interval (default 5s)")
    p.add_argument("--cleanup-every", type=float, help="seconds between runs of the clean-up job (default 5)")
    p.add_argument("--cleanup-batch", type=int, default=5000, help="rows per clean-up transaction (default 5000)")
    p.add_argument("--sample", type=float, help="seconds between samples (default 15)")
    p.add_argument("--kind", type=int, default=4, help="message ids: 4 (UUIDv4) or 7 (UUIDv7)")
    p.add_argument("--shared-buffers", default="512MB")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="extra postgresql.conf line")
    p.add_argument("--data-root", default="/work/bench-data" if os.path.isdir("/work/bench-data") else None)
    p.add_argument("--render", metavar="RESULTS_JSON", help="only re-render report.md and the SVGs")
    a = p.parse_args(argv)
    full = dict(minutes=30, rate=300, ttl="60s", purge_interval="5s", cleanup_every=5, sample=15,
                out=str(BENCH_DIR / "out" / "soak"))
    smoke = dict(minutes=0.67, rate=100, ttl="5s", purge_interval="1s", cleanup_every=1, sample=5,
                 out=str(BENCH_DIR / "out" / "soak-smoke"))
    for k, v in (smoke if a.smoke else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    return a


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.render:
        render(out, json.loads(Path(args.render).read_text()))
        return 0
    if args.pg:
        use_pg(args.pg)
    ttl_s = parse_interval_s(args.ttl)
    settings = [
        "shared_preload_libraries = 'pg_idem'",
        f"pg_idem.purge_interval = '{args.purge_interval}'",
        f"pg_idem.ttl = '{args.ttl}'",
        f"shared_buffers = '{args.shared_buffers}'",
        "max_wal_size = '16GB'", "min_wal_size = '1GB'", "checkpoint_timeout = '30min'",
        "max_connections = 100", "log_checkpoints = on", "log_autovacuum_min_duration = 0",
        "log_min_messages = warning",
    ]
    for line in args.set:
        name, _, value = line.partition("=")
        settings.append(f"{name.strip()} = '{value.strip()}'")

    interrupt_on_sigterm()
    started = time.time()
    results: dict = {"command": "python3 bench/runners/soak.py " + " ".join(shlex.quote(x) for x in argv),
                     "mode": "smoke" if args.smoke else "full",
                     "started_at": dt.datetime.now().isoformat(timespec="seconds"),
                     "args": {k: v for k, v in vars(args).items()}, "samples": []}
    problems: list[str] = []
    server = Server(settings, prefix="pg_idem_soak.", data_root=args.data_root)
    workdir = tempfile.mkdtemp(prefix="pg_idem_soak_logs.")
    job = None
    try:
        server.start_logged()
        server.execute((SCENARIO_DIR / "schema.sql").read_text())
        server.execute((SCALE_DIR / "schema.sql").read_text())
        results["environment"] = environment(server)
        seconds = args.minutes * 60
        cal0 = calibrate(server)
        ins0 = {r[0]: int(r[1]) for r in server.rows(
            "SELECT relid::regclass::text, n_tup_ins FROM pg_stat_user_tables "
            "WHERE relid IN ('idem.keys'::regclass, 'processed_messages'::regclass, 'payments'::regclass)")}
        job = CleanupJob(server, ttl_s, args.cleanup_every, args.cleanup_batch)
        box: dict = {}

        def load(side):
            box[side] = run_pgbench(server, workdir, SCALE_DIR / SIDES[side]["script"], args.clients, seconds,
                                    {"kind": args.kind}, rate=args.rate, keep_records=True, tag=f"soak-{side}")

        threads = [threading.Thread(target=load, args=(side,)) for side in SIDES]
        t_start = time.time()
        log(f"load: {args.rate:g}/s per side for {args.minutes:g} min, ttl {args.ttl}, purge every "
            f"{args.purge_interval}, clean-up every {args.cleanup_every:g} s")
        for t in threads:
            t.start()
        job.start()
        nxt = t_start
        while any(t.is_alive() for t in threads):
            if time.time() >= nxt:
                s = sample(server, ttl_s)
                s["t_rel"] = s["t"] - t_start
                results["samples"].append(s)
                a_, b_ = s["pg_idem"], s["hand-written"]
                log(f"  {s['t_rel'] / 60:5.1f} min  pg_idem {mib(a_['table'] + a_['indexes']):7.1f} MiB rows {a_['rows']:>7,} live {a_['live']:>8,.0f} "
                    f"dead {a_['dead']:>7,.0f} lag {a_['lag_s']:5.1f}s  |  hand {mib(b_['table'] + b_['indexes']):7.1f} MiB "
                    f"rows {b_['rows']:>7,} live {b_['live']:>8,.0f} dead {b_['dead']:>7,.0f} lag {b_['lag_s']:5.1f}s")
                nxt += args.sample
            time.sleep(0.2)
        for t in threads:
            t.join()
        job.finish()
        s = sample(server, ttl_s)
        s["t_rel"] = s["t"] - t_start
        results["samples"].append(s)
        server.wait_for_clients_gone()
        cal1 = calibrate(server)
        # TPS and p99 per sample interval, from the per-transaction logs
        S = results["samples"]
        for side in SIDES:
            recs = box.get(side).records if box.get(side) else []
            for i in range(1, len(S)):
                tps, p99 = interval_stats(recs, S[i - 1]["t"], S[i]["t"])
                S[i][side]["tps"], S[i][side]["p99_ms"] = tps, p99
        # sanity checks
        runs = {side: box.get(side) for side in SIDES}
        for side, r in runs.items():
            if r is None:
                problems.append(f"{side}: pgbench did not run")
                continue
            problems += [f"{side}: {e}" for e in r.errors]
            results.setdefault("pgbench", {})[side] = {"tps": r.tps, "txns": r.txns, "failed": r.failed,
                                                      "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                                                      "other_cpu_share": r.cpu.get("other_cpu_share"),
                                                      "steal_share": r.cpu.get("steal_share"),
                                                      "other_top": r.cpu.get("other_top")}
        ins1 = {r[0]: int(r[1]) for r in server.rows(
            "SELECT relid::regclass::text, n_tup_ins FROM pg_stat_user_tables "
            "WHERE relid IN ('idem.keys'::regclass, 'processed_messages'::regclass, 'payments'::regclass)")}
        if all(runs.values()):
            n_idem, n_hand = runs["pg_idem"].txns, runs["hand-written"].txns
            d = {k: ins1[k] - ins0.get(k, 0) for k in ins1}
            if d.get("idem.keys") != n_idem:
                problems.append(f"idem.keys inserts {d.get('idem.keys')} != consume transactions {n_idem}")
            if d.get("processed_messages") != n_hand:
                problems.append(f"processed_messages inserts {d.get('processed_messages')} != inbox transactions {n_hand}")
            if d.get("payments") != n_idem + n_hand:
                problems.append(f"payments inserts {d.get('payments')} != transactions {n_idem + n_hand}")
        st = S[-1].get("purge", {})
        results["purge_end"] = st
        # Does the purge worker report its deletions to the statistics? n_tup_del of idem.keys
        # before and after the worker exits (a process's pending table statistics are flushed by
        # pgstat_report_stat(), or at exit); the launcher starts it again.
        q = "SELECT n_tup_del, n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'idem.keys'::regclass"
        before = [int(x) for x in server.rows(q)[0]]
        n_term = int(server.value("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE backend_type = 'pg_idem purge'"))
        time.sleep(3.0)
        after = [int(x) for x in server.rows(q)[0]]
        results["purge_stats_check"] = {"purge_worker_keys": st.get("keys"), "terminated": n_term,
                                        "before_exit": dict(zip(["n_tup_del", "n_live_tup", "n_dead_tup"], before)),
                                        "after_exit": dict(zip(["n_tup_del", "n_live_tup", "n_dead_tup"], after))}
        log(f"purge worker statistics: n_tup_del {before[0]:,} before it exits, {after[0]:,} after "
            f"(it deleted {st.get('keys', 0):,} keys)")
        if not st.get("keys"):
            problems.append("the purge worker deleted no key")
        problems += [f"clean-up job: {e}" for e in job.errors]
        deleted = sum(t[1] for t in job.ticks)
        results["cleanup"] = {"ticks": len(job.ticks), "deleted": deleted,
                              "seconds_median": median([t[2] for t in job.ticks]) or 0,
                              "seconds_max": max([t[2] for t in job.ticks] or [0]),
                              "per_tick": [(round(t[0] - t_start, 1), t[1], round(t[2], 3)) for t in job.ticks]}
        if not deleted:
            problems.append("the clean-up job deleted no row")
        oc = [r.cpu.get("other_cpu_share") or 0 for r in runs.values() if r]
        stl = [r.cpu.get("steal_share") or 0 for r in runs.values() if r]
        results["noise"] = {"other_cpu": max(oc or [0]), "steal": max(stl or [0]), "cal_before_ms": cal0,
                            "cal_after_ms": cal1,
                            "other_top": next((r.cpu.get("other_top") for r in runs.values() if r), [])}
    except KeyboardInterrupt:
        problems.append("interrupted")
    except (BenchError, subprocess.TimeoutExpired, OSError) as e:
        problems.append(f"runner error: {e}")
        log(f"error: {e}")
    finally:
        if job is not None and job.is_alive():
            job.finish()
        replaced = library_replaced(results)
        if replaced:
            problems.append(f"{replaced} was replaced while the soak ran; rerun")
        log("stopping the server")
        server.stop(keep_log_in=out)
        shutil.rmtree(workdir, ignore_errors=True)
    stamp_end(results, started, problems)
    results["summary"] = summarize(results)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    render(out, results)
    log(f"done in {results['elapsed_s']:.0f}s; report: {out / 'report.md'}")
    for side, m in results["summary"].items():
        print(f"  {side:<13} size {m['size_at_half_mib']:.1f} -> {m['size_end_mib']:.1f} MiB "
              f"({m['growth_second_half_pct']:+.1f}% over the second half), lag median {m['lag_median_s'] or 0:.1f}s "
              f"max {m['lag_max_s']:.1f}s, TPS {m['tps_median'] or 0:.0f}, p99 {m['p99_median_ms'] or 0:.2f} ms")
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
