#!/usr/bin/env python3
"""pg_idem benchmark runner (Python 3.11, standard library only).

    python3 bench/runners/run.py --smoke            # CI: a few seconds per scenario, small key counts
    python3 bench/runners/run.py                    # full run: 3 rounds x 30 s, 1M keys (~30-40 min)
    python3 bench/runners/run.py --rounds 2 --duration 15 --keys 200000    # a medium run

Starts a throwaway PostgreSQL server (scripts/lib/pg.sh: initdb + pg_ctl as the `postgres` OS
user, 127.0.0.1 on a free port) with shared_preload_libraries = 'pg_idem', loads
bench/scenarios/schema.sql, runs every scenario of bench/scenarios/ with pgbench in alternation
(rounds in ABBA order, so drift on a noisy machine hits every scenario alike), measures sizes
and the purge, writes OUT/report.md, OUT/tps.svg, OUT/results.json and OUT/server.log, and always
stops the server. Exits non-zero when pgbench reported an error or a failed transaction, or a
sanity check of a scenario failed. Targets are reported, never asserted.

    python3 bench/runners/run.py --render bench/report/results.json   # re-render only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import (BATCH, BENCH_DIR, FILL_WORKERS, REPO_DIR, SCENARIO_DIR, SERVER_SETTINGS, BenchError,  # noqa: E402
                 PgbenchResult, Server, calibrate, check_tools, conf_lines, exit_status, fill_handrolled, fill_idem, interrupt_on_sigterm,
                 library_replaced, log, median, percentile, run_pgbench, stamp_end, timed_notice, use_pg)
from lib import render  # noqa: E402
from lib.environment import environment  # noqa: E402
from lib.scenario_list import SCENARIOS  # noqa: E402

# ------------------------------------------------------------------------------------------------
# Data preparation
# ------------------------------------------------------------------------------------------------

def reset_tables(server: Server) -> None:
    server.execute("""
TRUNCATE payments, handrolled_keys, plpgsql_keys, processed_messages, idem.keys RESTART IDENTITY;
ALTER SEQUENCE bench_pair_seq RESTART;
ALTER SEQUENCE bench_outcome_claimed RESTART;
ALTER SEQUENCE bench_outcome_completed RESTART;
ALTER SEQUENCE bench_outcome_in_progress RESTART;
ALTER SEQUENCE bench_outcome_other RESTART;
""")


def seq_count(server: Server, seq: str) -> int:
    last, called = server.rows(f"SELECT last_value, is_called FROM {seq}")[0]
    return int(last) if called == "t" else 0


def snapshot(server: Server) -> dict:
    row = server.rows("""
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,
       (SELECT wal_records FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
       (SELECT wal_bytes FROM pg_stat_wal),
       (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'idem.keys'::regclass),
       (SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'idem.keys'::regclass),
       (SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'public.handrolled_keys'::regclass),
       (SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'public.handrolled_keys'::regclass)
""")[0]
    keys = ["lsn", "wal_records", "wal_fpi", "wal_bytes", "idem_upd", "idem_hot", "hr_upd", "hr_hot"]
    return {k: int(float(v)) for k, v in zip(keys, row)}


# ------------------------------------------------------------------------------------------------
# The scenario matrix
# ------------------------------------------------------------------------------------------------

def check_run(server: Server, scenario: str, r: PgbenchResult, before: dict, after: dict,
              extra: dict, replay_pool: int) -> list[str]:
    """Sanity checks: the scenario did what it claims. Returns problems found."""
    problems = []
    q = server.rows("""
SELECT (SELECT count(*) FROM payments),
       (SELECT count(*) FROM handrolled_keys),
       (SELECT count(*) FILTER (WHERE status = 'completed') FROM handrolled_keys),
       (SELECT count(*) FROM idem.keys),
       (SELECT count(*) FROM idem.keys WHERE state = 'c'),
       (SELECT count(*) FROM idem.keys WHERE state = 'p'),
       (SELECT count(*) FILTER (WHERE state = 'c') FROM plpgsql_keys),
       (SELECT count(*) FROM processed_messages)
""")[0]
    payments, hr, hr_done, keys, keys_done, keys_open, pl_done, inbox = map(int, q)
    n = r.txns
    idem_upd = after["idem_upd"] - before["idem_upd"]
    hr_upd = after["hr_upd"] - before["hr_upd"]
    extra["rows"] = dict(payments=payments, handrolled_keys=hr, idem_keys=keys,
                         idem_completed=keys_done, idem_in_progress=keys_open, processed_messages=inbox)
    rel = {"handrolled": "handrolled_keys", "plpgsql": "plpgsql_keys", "pg_idem": "idem.keys", "lease": "idem.keys",
           "contended": "idem.keys", "inbox": "processed_messages", "inbox_batch": "processed_messages",
           "consume": "idem.keys", "consume_batch": "idem.keys"}.get(scenario)
    if rel:
        size = int(server.value(f"SELECT pg_table_size('{rel}') + pg_indexes_size('{rel}')"))
        rows = {"handrolled_keys": hr, "processed_messages": inbox}.get(rel, keys)
        extra["keys_bytes_per_key"] = size / max(1, rows)

    def expect(cond, text):
        if not cond:
            problems.append(f"{scenario}: {text}")

    if scenario == "bare":
        expect(payments == n, f"payments {payments} != transactions {n}")
    elif scenario == "handrolled":
        expect(payments == n and hr == n and hr_done == n,
               f"payments {payments}, keys {hr}, completed {hr_done} != transactions {n}")
        expect(hr_upd == n, f"handrolled_keys updates {hr_upd} != transactions {n}")
    elif scenario == "plpgsql":
        expect(payments == n and pl_done == n,
               f"payments {payments}, completed plpgsql_keys {pl_done} != transactions {n}")
    elif scenario in ("pg_idem", "lease"):
        expect(payments == n and keys == n and keys_done == n,
               f"payments {payments}, keys {keys}, completed {keys_done} != transactions {n}")
        expect(idem_upd == n, f"idem.keys updates {idem_upd} != transactions {n}")
    elif scenario == "replay":
        expect(payments == 0 and keys == replay_pool and keys_done == replay_pool,
               f"replay changed data: payments {payments}, keys {keys}/{replay_pool}")
        expect(idem_upd == 0, f"replay updated idem.keys {idem_upd} times")
    elif scenario in ("inbox", "inbox_batch", "consume", "consume_batch"):
        # one business row per new message; every message of every transaction was new (the
        # scripts fail a transaction otherwise), 1 or 100 per transaction
        m = n * (BATCH if scenario.endswith("_batch") else 1)
        recorded = inbox if scenario.startswith("inbox") else keys
        expect(payments == m and recorded == m,
               f"payments {payments}, recorded messages {recorded} != messages {m}")
        if scenario.startswith("consume"):
            expect(keys_done == m, f"{keys_done} of {m} consumed keys completed")
            expect(idem_upd == 0, f"idem.keys updated {idem_upd} times")
    elif scenario == "contended":
        outcomes = {o: seq_count(server, f"bench_outcome_{o}")
                    for o in ("claimed", "completed", "in_progress", "other")}
        extra["outcomes"] = outcomes
        expect(sum(outcomes.values()) == n, f"outcome tally {sum(outcomes.values())} != transactions {n}")
        expect(outcomes["other"] == 0, f"{outcomes['other']} claims answered mismatch/failed/stale_key")
        expect(payments == outcomes["claimed"] == keys_done == keys,
               f"payments {payments}, claimed {outcomes['claimed']}, keys {keys}, completed {keys_done} differ")
        expect(idem_upd == outcomes["claimed"], f"idem.keys updates {idem_upd} != claims {outcomes['claimed']}")
        expect(keys_open == 0, f"{keys_open} keys left in progress")
    return problems


def run_matrix(server: Server, args, workdir: str, results: dict) -> list[str]:
    problems: list[str] = []
    runs = []
    for sc in SCENARIOS:
        if sc not in args.scenarios:
            continue
        if sc == "contended":
            runs.append((sc, args.contended_clients))
        else:
            for c in args.clients:
                runs.append((sc, c))
    results["matrix_order"] = [f"{s}@{c}" for s, c in runs]
    data = results.setdefault("runs", {})
    replay_ready = {"n": 0}

    def prepare(sc: str):
        if sc == "replay":
            if replay_ready["n"] != args.replay_keys:
                reset_tables(server)
                t0 = time.time()
                fill_idem(server, args.replay_keys, "replay", body=True, lease=None, ttl=None)
                server.execute("VACUUM (ANALYZE) idem.keys;")
                log(f"  replay pool: {args.replay_keys} completed keys in {time.time() - t0:.1f}s")
                replay_ready["n"] = args.replay_keys
        else:
            # no ANALYZE here: statistics of an empty table (reltuples 0) make the generic plans
            # that pgbench's prepared statements and pg_idem's SPI plans keep for the whole run
            # sequential scans, and every transaction then scans the growing table. After
            # TRUNCATE reltuples is -1 (unknown) and the planner picks the indexes.
            reset_tables(server)
            replay_ready["n"] = 0
        server.execute("CHECKPOINT;")

    def variables(sc: str) -> dict:
        if sc == "replay":
            return {"pool": args.replay_keys}
        if sc == "contended":
            return {"run": uuid.uuid4().hex[:12]}
        return {}

    # warm-up: every script once, short, not recorded
    if args.warmup > 0:
        log(f"warm-up: {args.warmup}s per scenario")
        for sc in [s for s in SCENARIOS if s in args.scenarios]:
            prepare(sc)
            c = args.contended_clients if sc == "contended" else 2
            r = run_pgbench(server, workdir, SCENARIO_DIR / f"{sc}.sql", c, args.warmup,
                            variables(sc), tag=f"warm-{sc}")
            if r.errors:
                problems.append(f"warm-up {sc}: " + "; ".join(r.errors))
        server.wait_for_clients_gone()

    for rnd in range(args.rounds):
        order = runs if rnd % 2 == 0 else list(reversed(runs))
        log(f"round {rnd + 1}/{args.rounds}: " + " ".join(f"{s}@{c}" for s, c in order))
        for sc, c in order:
            prepare(sc)
            cal = calibrate(server)
            before = snapshot(server)
            r = run_pgbench(server, workdir, SCENARIO_DIR / f"{sc}.sql", c, args.duration,
                            variables(sc), tag=f"{sc}-{c}-{rnd}")
            server.wait_for_clients_gone()
            after = snapshot(server)
            extra: dict = {}
            probs = [f"{sc}@{c} round {rnd + 1}: {e}" for e in r.errors]
            if not r.errors:
                probs += check_run(server, sc, r, before, after, extra, args.replay_keys)
            problems += probs
            n = max(1, r.txns)
            rec = {
                "round": rnd + 1, "tps": r.tps, "txns": r.txns, "failed": r.failed,
                "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                "wal_bytes_per_txn": (after["lsn"] - before["lsn"]) / n,
                "wal_fpi_per_txn": (after["wal_fpi"] - before["wal_fpi"]) / n,
                "wal_records_per_txn": (after["wal_records"] - before["wal_records"]) / n,
                "idem_upd": after["idem_upd"] - before["idem_upd"],
                "idem_hot": after["idem_hot"] - before["idem_hot"],
                "hr_upd": after["hr_upd"] - before["hr_upd"],
                "hr_hot": after["hr_hot"] - before["hr_hot"],
                "other_cpu_share": r.cpu.get("other_cpu_share"), "other_top": r.cpu.get("other_top"),
                "steal_share": r.cpu.get("steal_share"), "our_cpu_share": r.cpu.get("our_cpu_share"),
                "cpu_cal_ms": cal,
                "errors": probs, **extra,
            }
            data.setdefault(f"{sc}@{c}", []).append(rec)
            tps_s = f"{r.tps:9.1f}" if r.tps is not None else "     n/a"
            p99_s = f"{r.p99_ms:.2f}" if r.p99_ms is not None else "n/a"
            noise = rec["other_cpu_share"] or 0
            log(f"  {sc:>10} @{c:<2} tps {tps_s}  p99 {p99_s} ms  "
                f"WAL {rec['wal_bytes_per_txn']:.0f} B/txn  other CPU {noise * 100:.0f}%  "
                f"steal {(rec['steal_share'] or 0) * 100:.0f}%  cal {cal:.0f} ms"
                + (f" ({', '.join(rec['other_top'])})" if noise > 0.05 else "")
                + ("  ERR " + "; ".join(probs) if probs else ""))
    return problems


# ------------------------------------------------------------------------------------------------
# Sizes and purge
# ------------------------------------------------------------------------------------------------

def rel_size(server: Server, rel: str) -> dict:
    server.execute(f"VACUUM (ANALYZE) {rel};")
    row = server.rows(f"SELECT pg_table_size('{rel}'), pg_indexes_size('{rel}'), "
                      f"pg_relation_size('{rel}'), count(*), coalesce(avg(pg_column_size(r.*)), 0) "
                      f"FROM {rel} AS r")[0]
    table, index, heap, count = map(int, row[:4])
    return {"table_bytes": table, "index_bytes": index, "heap_bytes": heap, "rows": count,
            "avg_row_bytes": float(row[4]),
            "per_key": (table + index) / max(1, count), "table_per_key": table / max(1, count),
            "index_per_key": index / max(1, count)}


def purge_status(server: Server) -> dict:
    row = server.rows("SELECT state, coalesce(last_pass_keys, 0), coalesce(last_pass_ms, 0), total_passes, "
                      "total_keys, extract(epoch FROM last_pass_at) FROM idem_purge_status() "
                      "WHERE database = current_database()")
    if not row:
        raise BenchError("idem_purge_status() has no row for this database (is pg_idem preloaded?)")
    state, keys, ms, passes, total, at = row[0]
    return {"state": state, "last_pass_keys": int(keys), "last_pass_ms": int(ms),
            "total_passes": int(passes), "total_keys": int(total),
            "last_pass_at": float(at) if at else None}


def set_purge_interval(server: Server, value: str | None) -> None:
    if value is None:
        server.execute("ALTER SYSTEM RESET pg_idem.purge_interval; SELECT pg_reload_conf();")
    else:
        server.execute(f"ALTER SYSTEM SET pg_idem.purge_interval = '{value}'; SELECT pg_reload_conf();")


def run_sizes_and_purge(server: Server, args, workdir: str, results: dict) -> list[str]:
    problems = []
    n = args.keys
    out = results.setdefault("storage", {})
    purge = results.setdefault("purge", {})

    # 1. pg_idem, no body: size, then idem_purge() of all of them (expired: lease/ttl 1 ms)
    reset_tables(server)
    log(f"sizes: filling {n} pg_idem keys (no body, expired)")
    out["fill_rate_pg_idem"] = fill_idem(server, n, "size", body=False, lease="1 ms", ttl="1 ms")
    out["pg_idem_nobody"] = rel_size(server, "idem.keys")
    server.execute("CHECKPOINT;")
    lsn0 = snapshot(server)["lsn"]
    deleted, secs = timed_notice(server, "n := idem_purge();")
    wal = snapshot(server)["lsn"] - lsn0
    purge["idem_purge"] = {"keys": deleted, "seconds": secs, "keys_per_s": deleted / max(secs, 1e-9),
                           "wal_bytes_per_key": wal / max(1, deleted)}
    if deleted != n:
        problems.append(f"idem_purge() deleted {deleted} of {n} expired keys")
    log(f"  idem_purge(): {deleted} keys in {secs:.2f}s = {deleted / max(secs, 1e-9):,.0f} keys/s")

    # 2. pg_idem, small body: size; these stay for the worker purge below
    reset_tables(server)
    log(f"sizes: filling {n} pg_idem keys (small body, expired)")
    fill_idem(server, n, "size", body=True, lease="1 ms", ttl="1 ms")
    out["pg_idem_body"] = rel_size(server, "idem.keys")

    # 3. claim latency without and with the purge worker deleting n keys
    base_tps = median([x["tps"] for x in results.get("runs", {}).get("pg_idem@1", [])]) or 200.0
    rate = max(20, int(base_tps * args.latency_load))
    purge["load"] = {"script": "pg_idem.sql", "clients": 2, "rate_tps": rate}
    server.execute("CHECKPOINT;")
    log(f"purge: baseline claim latency, pg_idem.sql at {rate} tps for {args.latency_seconds}s")
    purge["baseline_cal_ms"] = calibrate(server)
    lsn0 = snapshot(server)["lsn"]
    r0 = run_pgbench(server, workdir, SCENARIO_DIR / "pg_idem.sql", 2, args.latency_seconds,
                     rate=rate, tag="lat-base")
    server.wait_for_clients_gone()
    load_wal_per_txn = (snapshot(server)["lsn"] - lsn0) / max(1, r0.txns)
    purge["baseline_other_cpu"] = r0.cpu.get("other_cpu_share")
    purge["baseline_steal"] = r0.cpu.get("steal_share")
    problems += [f"latency baseline: {e}" for e in r0.errors]
    purge["baseline_p50_ms"], purge["baseline_p99_ms"] = r0.p50_ms, r0.p99_ms

    expired = int(server.value("SELECT count(*) FROM idem.keys WHERE coalesce(expires_at, purge_after) < now()"))
    status0 = purge_status(server)
    purge["during_cal_ms"] = calibrate(server)
    server.execute("CHECKPOINT;")
    lsn0 = snapshot(server)["lsn"]
    log(f"purge: worker purge of {expired} keys under the same load")
    # One pgbench run sized to outlast the pass (at half the rate idem_purge() just reached), and
    # more runs only if the pass takes longer still: each new pgbench connects afresh, and those
    # connection start-ups (counted in the latency of its first scheduled transactions) inside
    # the pass measured pgbench, not the purge. Every run's log is complete.
    est_rate = max(10_000.0, purge["idem_purge"]["keys_per_s"] / 2)
    first_chunk = min(args.max_purge_load, max(args.latency_seconds, 2 + expired / est_rate + 3))
    chunk = max(2.0, min(5.0, args.latency_seconds))
    purge["load_runs"] = 0
    stop = threading.Event()
    r1 = PgbenchResult()
    r1.cpu = {"other_cpu_share": 0.0, "steal_share": 0.0}

    def load():
        i = 0
        while True:
            r = run_pgbench(server, workdir, SCENARIO_DIR / "pg_idem.sql", 2,
                            first_chunk if i == 0 else chunk,
                            rate=rate, keep_records=True, tag=f"lat-purge-{i}")
            i += 1
            purge["load_runs"] = i
            r1.records += r.records
            r1.txns += r.txns
            r1.errors += r.errors
            r1.cpu["other_cpu_share"] = max(r1.cpu["other_cpu_share"], r.cpu.get("other_cpu_share") or 0)
            r1.cpu["steal_share"] = max(r1.cpu["steal_share"], r.cpu.get("steal_share") or 0)
            if stop.is_set() or r.errors:
                return

    th = threading.Thread(target=load)
    th.start()
    time.sleep(2.0)
    # a long interval: the worker wakes on the reload, runs exactly one pass, then sleeps
    set_purge_interval(server, "1h")
    deadline = time.time() + args.max_purge_load
    st = status0
    while time.time() < deadline:
        st = purge_status(server)
        if st["total_passes"] > status0["total_passes"] and st["state"] != "purging":
            break
        time.sleep(0.05)
    else:
        problems.append(f"the purge worker's pass did not end within {args.max_purge_load:.0f}s")
    time.sleep(1.0)
    stop.set()
    set_purge_interval(server, None)
    th.join()
    server.wait_for_clients_gone()
    problems += [f"latency during purge: {e}" for e in r1.errors]
    purge["during_other_cpu"] = r1.cpu.get("other_cpu_share")
    purge["during_steal"] = r1.cpu.get("steal_share")
    keys_w, ms_w = st["last_pass_keys"], st["last_pass_ms"]
    wal_w = snapshot(server)["lsn"] - lsn0 - load_wal_per_txn * r1.txns
    purge["worker"] = {"keys": keys_w, "ms": ms_w, "keys_per_s": keys_w / max(ms_w / 1000.0, 1e-9),
                       "wal_bytes_per_key": wal_w / max(1, keys_w),
                       "batch_size": int(server.value("SHOW pg_idem.purge_batch_size")),
                       "expired_before": expired}
    if keys_w < expired:
        problems.append(f"purge worker pass deleted {keys_w} of {expired} expired keys")
    log(f"  worker: {keys_w} keys in {ms_w} ms = {purge['worker']['keys_per_s']:,.0f} keys/s")
    during = []
    if st["last_pass_at"]:
        w_end = st["last_pass_at"]
        w_start = w_end - ms_w / 1000.0
        purge["window_s"] = ms_w / 1000.0
        # transactions that overlapped the purge pass
        during = sorted(us for end, us in r1.records if end >= w_start and end - us / 1e6 <= w_end)
        purge["during_txns"] = len(during)
        outside = sorted(us for end, us in r1.records if end < w_start or end - us / 1e6 > w_end)
        purge["outside_p99_ms"] = percentile(outside, 99) / 1000.0 if outside else None
    purge["during_p50_ms"] = percentile(during, 50) / 1000.0 if during else None
    purge["during_p99_ms"] = percentile(during, 99) / 1000.0 if during else None
    purge["during_max_ms"] = during[-1] / 1000.0 if during else None
    log(f"  claim p99 baseline {purge['baseline_p99_ms']} ms, during purge {purge['during_p99_ms']} ms "
        f"({len(during)} txns)")

    # 4. hand-rolled table, no body and small body; its own DELETE as a purge reference
    for body in (False, True):
        reset_tables(server)
        log(f"sizes: filling {n} handrolled keys ({'small body' if body else 'no body'})")
        rate_hr = fill_handrolled(server, n, "size", body=body, ttl="1 ms")
        out["fill_rate_handrolled"] = rate_hr
        out["fill_workers"] = FILL_WORKERS
        out["handrolled_body" if body else "handrolled_nobody"] = rel_size(server, "handrolled_keys")
    # the reference purge runs under the same claim load: what a bare DELETE of as many rows
    # does to claim latency on this machine (on 2 CPUs, any busy backend takes half of it)
    server.execute("CHECKPOINT;")
    load_s = max(args.latency_seconds, 2 + n / 100_000 + 3)
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", run_pgbench(
        server, workdir, SCENARIO_DIR / "pg_idem.sql", 2, load_s, rate=rate, keep_records=True, tag="lat-hr")))
    th.start()
    time.sleep(2.0)
    t0 = time.time()
    deleted, secs = timed_notice(server, "DELETE FROM handrolled_keys WHERE expires_at < now(); "
                                         "GET DIAGNOSTICS n = ROW_COUNT;")
    t1 = time.time()
    th.join()
    server.wait_for_clients_gone()
    r2 = box["r"]
    problems += [f"latency during handrolled DELETE: {e}" for e in r2.errors]
    during = sorted(us for end, us in r2.records if end >= t0 and end - us / 1e6 <= t1)
    purge["handrolled_delete"] = {"keys": deleted, "seconds": secs, "keys_per_s": deleted / max(secs, 1e-9),
                                  "during_p99_ms": percentile(during, 99) / 1000.0 if during else None,
                                  "during_txns": len(during)}
    reset_tables(server)
    return problems


# ------------------------------------------------------------------------------------------------
# Environment
# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="pg_idem benchmark suite (see bench/README.md)")
    p.add_argument("--smoke", action="store_true", help="CI mode: ~3 s per run, 1 round, small key counts")
    p.add_argument("--out", default=str(BENCH_DIR / "out"), help="output directory (default bench/out/)")
    p.add_argument("--rounds", type=int, help="rounds of the scenario matrix (full: 3)")
    p.add_argument("--duration", type=float, help="seconds per pgbench run (full: 30)")
    p.add_argument("--keys", type=int, help="keys for the size and purge measurements (full: 1000000)")
    p.add_argument("--replay-keys", type=int, help="completed keys in the replay pool (full: 100000)")
    p.add_argument("--clients", default="1,8", help="client counts, comma-separated (default 1,8)")
    p.add_argument("--contended-clients", type=int, default=16)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="subset to run, comma-separated")
    p.add_argument("--warmup", type=float, help="seconds of unrecorded warm-up per scenario")
    p.add_argument("--latency-seconds", type=float, help="seconds of the baseline claim-latency load")
    p.add_argument("--latency-load", type=float, default=0.25,
                   help="claim load during the purge, as a fraction of pg_idem@1 TPS (default 0.25)")
    p.add_argument("--max-purge-load", type=float, default=900,
                   help="longest wait for the purge worker's pass, in seconds (default 900)")
    p.add_argument("--skip-storage", action="store_true", help="skip sizes and purge")
    p.add_argument("--pg", help="PostgreSQL major version to run on (default: Debian's 15, or "
                   "$PG_CONFIG / pg_config on PATH); it must have pg_idem installed "
                   "(scripts/install.sh --pg NN)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="extra postgresql.conf line (repeatable), e.g. --set synchronous_commit=off")
    p.add_argument("--render", metavar="RESULTS_JSON",
                   help="only re-render report.md and tps.svg next to a results.json, no measuring")
    a = p.parse_args(argv)
    full = dict(rounds=3, duration=30, keys=1_000_000, replay_keys=100_000, warmup=5, latency_seconds=20)
    smoke = dict(rounds=1, duration=3, keys=20_000, replay_keys=5_000, warmup=1, latency_seconds=3)
    for k, v in (smoke if a.smoke else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.clients = [int(x) for x in a.clients.split(",") if x.strip()]
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    unknown = set(a.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    return a


def main(argv=None) -> int:
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.render:
        path = Path(args.render)
        render.render(path.parent, json.loads(path.read_text()))
        print(f"rendered {path.parent / 'report.md'} and {path.parent / 'tps.svg'}")
        return 0
    if args.pg:
        use_pg(args.pg)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        check_tools()
        settings = [
            "shared_preload_libraries = 'pg_idem'",
            "pg_idem.purge_interval = 0",          # paused, except during the purge measurement
            "shared_buffers = '2GB'",
        ] + SERVER_SETTINGS + conf_lines(args.set)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    interrupt_on_sigterm()
    started = time.time()
    results: dict = {"command": "python3 " + " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO_DIR)] + (argv if argv is not None else sys.argv[1:])),
                     "mode": "smoke" if args.smoke else "full",
                     "started_at": dt.datetime.now().isoformat(timespec="seconds")}
    results["args"] = {k: v for k, v in vars(args).items()}
    problems: list[str] = []
    server = Server(settings)
    workdir = tempfile.mkdtemp(prefix="pg_idem_bench_logs.")
    try:
        server.start_logged()
        server.execute((SCENARIO_DIR / "schema.sql").read_text())
        results["environment"] = environment(server)
        so = results["environment"].get("pg_idem_so", {})
        log(f"pg_idem.so: {so.get('bytes')} bytes, {so.get('profile_guess')}")
        problems += run_matrix(server, args, workdir, results)
        if not args.skip_storage:
            problems += run_sizes_and_purge(server, args, workdir, results)
    except KeyboardInterrupt:
        problems.append("interrupted")
        log("interrupted")
    except (BenchError, subprocess.TimeoutExpired) as e:
        problems.append(f"runner error: {e}")
        log(f"error: {e}")
    finally:
        replaced = library_replaced(results)
        if replaced:
            problems.append(f"{replaced} was replaced while the benchmark ran (a server that preloads "
                            f"it crashes or mixes builds); rerun")
        log("stopping the server")
        server.stop(keep_log_in=out)
        shutil.rmtree(workdir, ignore_errors=True)

    stamp_end(results, started, problems)
    summ = render.summarize(results)
    results["summary"] = summ
    # missing numbers are errors too: every scenario must have produced a TPS and percentiles
    for sc in args.scenarios:
        cs = [args.contended_clients] if sc == "contended" else args.clients
        for c in cs:
            s = summ.get(f"{sc}@{c}")
            if not s or s["tps"] is None or s["p99_ms"] is None:
                problems.append(f"{sc}@{c}: no result")
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    render.render(out, results)

    log(f"done in {results['elapsed_s']:.0f}s; report: {out / 'report.md'}")
    print()
    for key, s in summ.items():
        print(f"  {key:<14} tps {render.fmt(s['tps']):>10}  p50 {render.fmt(s['p50_ms'], 3):>8} ms  p99 {render.fmt(s['p99_ms'], 3):>8} ms")
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
