#!/usr/bin/env python3
"""pg_idem at scale: pg_idem and the hand-written patterns side by side at growing table sizes
(Python 3.11, standard library only; see bench/README.md, "scale.py").

    python3 bench/runners/scale.py --smoke --pg 17                 # < 1 minute, tiny sizes, exits 1 on a failed check
    python3 bench/runners/scale.py --pg 17                         # 0 and 10M keys, UUIDv4 and UUIDv7
    python3 bench/runners/scale.py --pg 17 --memory-limit 1G --sizes 30000000 --kinds 4 --groups request \\
        --out bench/out/scale-cgroup                       # data several times larger than memory

Pairs (bench/scenarios/scale/*.sql, the scenarios of bench/scenarios/ with UUID keys):
`request` = handrolled vs pg_idem, `inbox` = inbox vs consume and inbox_batch vs consume_batch.
For each key kind and group, each size step starts from truncated tables, pre-fills both sides'
tables the same way (INSERT ... SELECT from generate_series, rows as the real calls write them),
VACUUM (ANALYZE), CHECKPOINT, then runs rounds alternating the scenarios (ABBA) without
truncating, so the tables grow across rounds. With --memory-limit the server is restarted in a
cgroup v1 memory group after the pre-fill (its files evicted from the page cache first).
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import (BENCH_DIR, PG_SH, REQUEST_HASH, SCENARIO_DIR, BenchError, Server, calibrate,  # noqa: E402
                 exit_status, fmt, in_parallel, interrupt_on_sigterm, library_replaced, log, median, run_pgbench,
                 stamp_end, use_pg)
from lib import charts  # noqa: E402
from lib.environment import environment  # noqa: E402

SCALE_DIR = SCENARIO_DIR / "scale"
GROUPS = {
    "request": [("handrolled", "pg_idem")],
    "inbox": [("inbox", "consume"), ("inbox_batch", "consume_batch")],
}
TABLE = {"handrolled": "handrolled_keys", "pg_idem": "idem.keys", "inbox": "processed_messages",
         "inbox_batch": "processed_messages", "consume": "idem.keys", "consume_batch": "idem.keys"}
HAND = {"handrolled", "inbox", "inbox_batch"}
ALL_TABLES = ["idem.keys", "handrolled_keys", "processed_messages", "payments"]
BATCH = 100
STEP_US = 100          # pre-filled keys are this many microseconds apart (their claimed_at / v7 time)
CHUNK = 1_000_000      # rows per INSERT ... SELECT of the pre-fill (one transaction each)
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def per_txn_msgs(sc: str) -> int:
    return BATCH if sc.endswith("_batch") else 1


# ------------------------------------------------------------------------------------------------
# The server: lib.py's, plus stop/start of the same data directory (optionally in a cgroup)
# ------------------------------------------------------------------------------------------------

class ScaleServer(Server):
    cgroup: Path | None = None

    def pg_ctl(self, action: str, opts: str = "", cgroup: Path | None = None) -> None:
        enter = f"echo $$ > {shlex.quote(str(cgroup / 'cgroup.procs'))}; " if cgroup else ""
        o = f"-o {shlex.quote(opts)}" if opts else ""
        mode = "-m fast" if action == "stop" else ""
        script = (f"{enter}source {shlex.quote(str(PG_SH))}; pg_run \"$PG_BINDIR/pg_ctl\" -D "
                  f"{shlex.quote(self.dir + '/data')} -l {shlex.quote(self.dir + '/server.log')} "
                  f"-w -t 300 {mode} {action} {o}")
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise BenchError(f"pg_ctl {action} failed:\n{res.stdout}\n{res.stderr}")
        self.cgroup = cgroup if action == "start" else None

    def postmaster_pid(self) -> int:
        return int(Path(self.dir, "data", "postmaster.pid").read_text().split()[0])


def evict_page_cache(path: str) -> int:
    """Drops the (clean) page cache of every file under `path` (posix_fadvise DONTNEED), so that a
    server started in a memory cgroup reads them again instead of finding them cached and charged
    to another group. Returns the bytes of the files."""
    os.sync()
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                total += os.fstat(fd).st_size
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    return total


def cached_bytes(path: str) -> int | None:
    """Bytes of the files under `path` resident in the page cache (util-linux fincore)."""
    files = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
    if not files or shutil.which("fincore") is None:
        return None
    total = 0
    for i in range(0, len(files), 500):
        res = subprocess.run(["fincore", "-b", "-n", "-o", "RES"] + files[i:i + 500],
                             capture_output=True, text=True)
        total += sum(int(x) for x in res.stdout.split() if x.isdigit())
    return total


def cgroup_stats(cg: Path | None) -> dict:
    if cg is None:
        return {}
    out = {}
    for name in ("memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes", "memory.failcnt"):
        try:
            out[name] = int((cg / name).read_text())
        except OSError:
            pass
    try:
        for line in (cg / "memory.stat").read_text().splitlines():
            k, v = line.split()
            if k in ("cache", "rss", "shmem", "mapped_file", "pgmajfault", "total_cache", "total_rss"):
                out[f"stat.{k}"] = int(v)
    except OSError:
        pass
    return out


def disk_sectors_read() -> int:
    """Sectors read by the machine's whole disks (/proc/diskstats, devices of /sys/block but
    loop, ram and dm): machine-wide, so another process's reads count too."""
    try:
        disks = {d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "dm-", "zram"))}
        total = 0
        for line in Path("/proc/diskstats").read_text().splitlines():
            f = line.split()
            if len(f) > 5 and f[2] in disks:
                total += int(f[5])
        return total
    except OSError:
        return 0


# ------------------------------------------------------------------------------------------------
# Pre-fill: rows exactly as the real calls write them, the same way for both sides
# ------------------------------------------------------------------------------------------------

def templates(server: Server) -> None:
    """A real call for request keys (idem_claim + idem_complete): a copy of the row it wrote is the
    template of their pre-fill; the real row is deleted again. Consumed messages are pre-filled
    through idem_consume itself (`fill_sql`)."""
    server.execute(f"""
DROP TABLE IF EXISTS scale_tmpl_request;
DO $$
DECLARE f bigint;
BEGIN
  SELECT c.fence INTO f FROM idem_claim('t1', 'scale-template', '{REQUEST_HASH}') AS c;
  PERFORM idem_complete('t1', 'scale-template', f, 201,
          jsonb_build_object('payment_id', 1234567::bigint, 'status', 'succeeded', 'amount_cents', 4321::bigint));
END
$$;
-- base: the instant the template row was written at, from which its times are offsets
CREATE TABLE scale_tmpl_request AS SELECT k.*, k.claimed_at AS base FROM idem.keys AS k
 WHERE tenant = 't1' AND key = 'scale-template';
DELETE FROM idem.keys WHERE key = 'scale-template';
""")


def fill_sql(sc: str, kind: int, lo: int, hi: int, n: int) -> str:
    """One INSERT ... SELECT of keys lo..hi (of n) into `sc`'s table. Keys g are
    bench_uuid(kind, 'fill-' || g, ts_g), ts_g = start + g * STEP_US µs, start so that the last
    one is a minute before now: increasing timestamps, as keys arriving over time have (v7 keys
    sort by them; indexes on timestamps grow at their right end)."""
    ts = f"(now() - interval '1 minute' - ({n} - g) * interval '{STEP_US} microseconds')"
    key = f"bench_uuid({kind}, 'fill-' || g, {ts})"
    body = ("jsonb_build_object('payment_id', g, 'status', 'succeeded', 'amount_cents', 100 + g % 99900)")
    gs = f"generate_series({lo}, {hi}) AS g"
    if sc == "pg_idem":
        return f"""INSERT INTO idem.keys (fence, claimed_at, lease_expires_at, expires_at, purge_after, ttl, attempt,
    response_code, state, tenant, key, request_hash, response_body, checkpoint_phase, checkpoint_data)
SELECT t.fence, {ts} + (t.claimed_at - t.base), t.lease_expires_at, {ts} + (t.expires_at - t.base), {ts} + (t.purge_after - t.base),
       t.ttl, t.attempt, t.response_code, t.state, 't' || (g % 100 + 1), {key}, t.request_hash, {body},
       t.checkpoint_phase, t.checkpoint_data
  FROM scale_tmpl_request AS t, {gs};"""
    if sc == "handrolled":
        return f"""INSERT INTO handrolled_keys (tenant, key, request_hash, status, response_code, response_body, created_at, expires_at)
SELECT 't' || (g % 100 + 1), {key}, '{REQUEST_HASH}', 'completed', 201, {body}, {ts}, {ts} + interval '24 hours'
  FROM {gs};"""
    if sc in ("consume", "consume_batch"):
        # through idem_consume itself: the engine writes a message row without its trailing NULLs
        # (8 bytes less than a row the executor forms, which INSERT ... SELECT would write); the
        # ttl makes its expiry about ts_g + pg_idem.ttl, as for a consume at ts_g (a consume reads
        # clock_timestamp(), which runs ahead of now() during the statement: still increasing)
        return f"""SELECT count(*) FROM {gs}
 WHERE idem_consume('sub-' || (g % 10 + 1), {key},
                    {ts} + current_setting('pg_idem.ttl')::interval - now());"""
    if sc in ("inbox", "inbox_batch"):
        return f"""INSERT INTO processed_messages (subscriber_id, message_id, processed_at)
SELECT 'sub-' || (g % 10 + 1), {key}, {ts}::timestamp FROM {gs};"""
    raise ValueError(sc)


def fill_side(server: Server, sc: str, kind: int, n: int) -> None:
    """Fills `sc`'s table with n keys in chunks of CHUNK rows.

    Completed request keys written whole by INSERT ... SELECT would leave every page of idem.keys
    with its fillfactor reserve (5%) plus the rest of the last row free: room for one more claim,
    so every new claim of the runs would land in (and write a full-page image of) an old page.
    Real calls leave less (a claim's narrow row is widened in place by idem_complete;
    bench/fill_layout.py, removed after 45f9b77: 68 of 3,000 new claims went to old pages after
    a real-call fill, all 3,000 after a plain pre-fill, 15 after this packed one). So these pages are packed full, as the
    hand-written table's are (fillfactor 100: 7 of 3,000 to old pages pre-filled, 437 after
    real calls, which this pre-fill does not reproduce on that side), and the table's own
    fillfactor comes back before the runs. Consumed messages are written once and never updated: their pre-fill leaves
    what the calls leave (it is the calls: `fill_sql`)."""
    packed = sc == "pg_idem"
    if packed:
        server.execute("ALTER TABLE idem.keys SET (fillfactor = 100)")
    for lo in range(1, n + 1, CHUNK):
        hi = min(n, lo + CHUNK - 1)
        written = server.rows("SET synchronous_commit = off;\n" + fill_sql(sc, kind, lo, hi, n))
        if sc in ("consume", "consume_batch") and written != [[str(hi - lo + 1)]]:
            raise BenchError(f"the pre-fill consumed {written} new messages of {hi - lo + 1}")
    if packed:
        server.execute("ALTER TABLE idem.keys SET (fillfactor = 95)")


def prefill(server: Server, group: str, kind: int, n: int) -> dict:
    """Fills each side's table of `group` with n keys; the two sides in parallel sessions, each in
    chunks of CHUNK rows. Returns seconds per side."""
    a, b = GROUPS[group][0]
    out = {}

    def side(sc):
        t0 = time.time()
        fill_side(server, sc, kind, n)
        out[TABLE[sc]] = time.time() - t0

    in_parallel(side, (a, b))
    return out


def row_width_check(server: Server, group: str, kind: int) -> dict:
    """pg_column_size of a row written by a real call of each side next to a pre-filled row's (the
    pre-fill must write what the calls write). In one transaction (one now(), one key), rolled
    back: the real rows are not kept."""
    key = f"bench_uuid({kind}, 'width', now())"
    sample = ("(SELECT pg_column_size(x.*) FROM {t} x TABLESAMPLE SYSTEM (1) REPEATABLE (1) WHERE {c} LIMIT 1), "
              "(SELECT pg_column_size(x.*) FROM {t} x WHERE {c} LIMIT 1)")
    if group == "request":
        rows = server.rows(f"""
BEGIN;
SELECT c.fence FROM idem_claim('t1', {key}, '{REQUEST_HASH}') AS c \\gset
SELECT idem_complete('t1', {key}, :fence, 201,
       jsonb_build_object('payment_id', 1234567::bigint, 'status', 'succeeded', 'amount_cents', 4321::bigint)) IS NULL AS done \\gset
INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at)
VALUES ('t1', {key}, '{REQUEST_HASH}', 'in_progress', now() + interval '24 hours');
UPDATE handrolled_keys SET status = 'completed', response_code = 201,
       response_body = jsonb_build_object('payment_id', 1234567::bigint, 'status', 'succeeded', 'amount_cents', 4321::bigint)
 WHERE tenant = 't1' AND key = {key};
SELECT (SELECT pg_column_size(k.*) FROM idem.keys k WHERE tenant = 't1' AND key = {key}),
       (SELECT pg_column_size(h.*) FROM handrolled_keys h WHERE tenant = 't1' AND key = {key}),
       {sample.format(t="idem.keys", c="tenant <> 't1'")},
       {sample.format(t="handrolled_keys", c="tenant <> 't1'")};
ROLLBACK;""")
        r = rows[-1]
        return {"pg_idem_real": r[0], "handrolled_real": r[1], "pg_idem_prefilled": r[2] or r[3],
                "handrolled_prefilled": r[4] or r[5]}
    rows = server.rows(f"""
BEGIN;
SELECT idem_consume('sub-1', {key}) AS new \\gset
INSERT INTO processed_messages (subscriber_id, message_id) VALUES ('sub-1', {key});
SELECT (SELECT pg_column_size(k.*) FROM idem.keys k WHERE tenant = 'sub-1' AND key = {key}),
       (SELECT pg_column_size(m.*) FROM processed_messages m WHERE subscriber_id = 'sub-1' AND message_id = {key}),
       {sample.format(t="idem.keys", c="tenant <> 'sub-1'")},
       {sample.format(t="processed_messages", c="subscriber_id <> 'sub-1'")};
ROLLBACK;""")
    r = rows[-1]
    return {"consume_real": r[0], "inbox_real": r[1], "consume_prefilled": r[2] or r[3], "inbox_prefilled": r[4] or r[5]}


# ------------------------------------------------------------------------------------------------
# Measurements
# ------------------------------------------------------------------------------------------------

def snapshot(server: Server, has_io: bool) -> dict:
    snap = {"lsn": int(float(server.value("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))),
            "disk_sectors_read": disk_sectors_read(), "tables": {}, "indexes": {}}
    rel_list = ",".join(f"'{t}'::regclass" for t in ALL_TABLES)
    for row in server.rows(f"""
SELECT s.relid::regclass::text, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_live_tup, s.n_dead_tup,
       coalesce(io.heap_blks_read, 0), coalesce(io.heap_blks_hit, 0), coalesce(io.idx_blks_read, 0),
       coalesce(io.idx_blks_hit, 0), s.autovacuum_count, s.autoanalyze_count
  FROM pg_stat_user_tables s JOIN pg_statio_user_tables io USING (relid)
 WHERE s.relid IN ({rel_list})"""):
        snap["tables"][row[0]] = dict(zip(
            ["ins", "upd", "hot", "live", "dead", "heap_read", "heap_hit", "idx_read", "idx_hit",
             "autovacuum", "autoanalyze"], map(int, row[1:])))
    for row in server.rows(f"""
SELECT indexrelid::regclass::text, relid::regclass::text, idx_blks_read, idx_blks_hit
  FROM pg_statio_user_indexes WHERE relid IN ({rel_list})"""):
        snap["indexes"][row[0]] = {"table": row[1], "read": int(row[2]), "hit": int(row[3])}
    if has_io:
        row = server.rows("""
SELECT coalesce(sum(reads), 0), coalesce(sum(hits), 0), coalesce(sum(writes), 0), coalesce(sum(extends), 0),
       coalesce(sum(evictions), 0)
  FROM pg_stat_io WHERE backend_type = 'client backend' AND object = 'relation'""")[0]
        snap["io"] = dict(zip(["reads", "hits", "writes", "extends", "evictions"], map(lambda v: int(float(v)), row)))
    return snap


def relation_sizes(server: Server, table: str) -> dict:
    """pg_relation_size of the heap and of each index, the exact row count, bytes per key."""
    rows = int(server.value(f"SELECT count(*) FROM {table}"))
    heap = int(server.value(f"SELECT pg_relation_size('{table}')"))
    toast = int(server.value(f"SELECT pg_table_size('{table}') - pg_relation_size('{table}')"))
    idx = {r[0]: int(r[1]) for r in server.rows(
        f"SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
        f"WHERE indrelid = '{table}'::regclass ORDER BY 1")}
    per = max(1, rows)
    return {"rows": rows, "heap_bytes": heap, "toast_fsm_vm_bytes": toast, "index_bytes": idx,
            "heap_per_key": heap / per, "index_per_key": {k: v / per for k, v in idx.items()},
            "total_per_key": (heap + toast + sum(idx.values())) / per}


def delta_record(sc: str, r, before: dict, after: dict, has_io: bool) -> tuple[dict, list[str]]:
    n = max(1, r.txns)
    msgs = r.txns * per_txn_msgs(sc)
    tab = TABLE[sc]
    tb, ta = before["tables"], after["tables"]

    def d(t, k):
        return ta.get(t, {}).get(k, 0) - tb.get(t, {}).get(k, 0)

    rec = {
        "tps": r.tps, "txns": r.txns, "messages": msgs, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
        "table": tab, "rows_before": tb.get(tab, {}).get("live"), "rows_after": ta.get(tab, {}).get("live"),
        "wal_bytes_per_txn": (after["lsn"] - before["lsn"]) / n,
        "heap_read_per_txn": d(tab, "heap_read") / n, "idx_read_per_txn": d(tab, "idx_read") / n,
        "heap_hit_per_txn": d(tab, "heap_hit") / n, "idx_hit_per_txn": d(tab, "idx_hit") / n,
        "payments_read_per_txn": (d("payments", "heap_read") + d("payments", "idx_read")) / n,
        "index_read_per_txn": {i: (after["indexes"][i]["read"] - before["indexes"].get(i, {}).get("read", 0)) / n
                               for i, v in after["indexes"].items() if v["table"] == tab},
        "disk_kb_read_per_txn": (after["disk_sectors_read"] - before["disk_sectors_read"]) * 512 / 1024 / n,
        "autovacuum_runs": sum(d(t, "autovacuum") for t in ALL_TABLES),
        "other_cpu_share": r.cpu.get("other_cpu_share"), "other_top": r.cpu.get("other_top"),
        "steal_share": r.cpu.get("steal_share"),
    }
    if has_io:
        rec["io_reads_per_txn"] = (after["io"]["reads"] - before["io"]["reads"]) / n
        rec["io_hits_per_txn"] = (after["io"]["hits"] - before["io"]["hits"]) / n
        rec["io_evictions_per_txn"] = (after["io"]["evictions"] - before["io"]["evictions"]) / n
    probs = list(r.errors)
    if not r.errors:
        # the sanity checks of run.py's check_run, as deltas: the tables are not empty here
        if d("payments", "ins") != msgs:
            probs.append(f"payments inserts {d('payments', 'ins')} != messages {msgs}")
        if d(tab, "ins") != msgs:
            probs.append(f"{tab} inserts {d(tab, 'ins')} != messages {msgs}")
        want_upd = r.txns if sc in ("pg_idem", "handrolled") else 0
        if d(tab, "upd") != want_upd:
            probs.append(f"{tab} updates {d(tab, 'upd')} != {want_upd}")
        for t in ("idem.keys", "handrolled_keys", "processed_messages"):
            if t != tab and d(t, "ins"):
                probs.append(f"{sc} wrote {d(t, 'ins')} rows into {t}")
    return rec, probs


# ------------------------------------------------------------------------------------------------
# One size step of one group and key kind
# ------------------------------------------------------------------------------------------------

def truncate(server: Server) -> None:
    server.execute("TRUNCATE payments, handrolled_keys, processed_messages, idem.keys RESTART IDENTITY;")


def run_step(server: ScaleServer, args, workdir: str, kind: int, group: str, size: int,
             has_io: bool, cgroup: Path | None) -> tuple[dict, list[str]]:
    problems: list[str] = []
    scen = [s for pair in GROUPS[group] for s in pair]
    tag = f"v{kind} {group} {size:,}"
    step: dict = {"kind": kind, "group": group, "size": size, "runs": {s: [] for s in scen},
                  "memory_limited": bool(cgroup)}
    truncate(server)
    tables = sorted({TABLE[s] for s in scen})
    if size:
        log(f"[{tag}] pre-fill: {size:,} keys per side")
        t0 = time.time()
        step["fill_seconds"] = prefill(server, group, kind, size)
        log(f"[{tag}]   filled in {time.time() - t0:.0f}s ({step['fill_seconds']}); VACUUM (ANALYZE)")
        t0 = time.time()
        server.execute("VACUUM (ANALYZE) " + ", ".join(tables) + ";", timeout=7200)
        step["vacuum_seconds"] = time.time() - t0
        step["row_width"] = row_width_check(server, group, kind)
    server.execute("CHECKPOINT;")
    step["sizes_start"] = {t: relation_sizes(server, t) for t in tables}
    expected = {t: step["sizes_start"][t]["rows"] for t in tables}
    if cgroup is not None:
        server.pg_ctl("stop")
        t0 = time.time()
        step["evicted_bytes"] = evict_page_cache(server.dir)
        step["cached_bytes_after_evict"] = cached_bytes(server.dir)
        log(f"[{tag}] server stopped, {step['evicted_bytes'] / 2**30:.1f} GiB of files evicted from the page cache "
            f"({(step['cached_bytes_after_evict'] or 0) / 2**20:.0f} MiB still cached); restarting in {cgroup} "
            f"with shared_buffers {args.limited_shared_buffers}")
        server.pg_ctl("start", f"-c shared_buffers={args.limited_shared_buffers}", cgroup=cgroup)
        step["postmaster_cgroup"] = Path(f"/proc/{server.postmaster_pid()}/cgroup").read_text().strip()
        step["cgroup_at_start"] = cgroup_stats(cgroup)
        step["shared_buffers"] = server.value("SHOW shared_buffers")
    else:
        step["shared_buffers"] = server.value("SHOW shared_buffers")

    def variables():
        return {"kind": kind}

    clients = {s: (args.batch_clients if s.endswith("_batch") else args.clients) for s in scen}
    if args.warmup > 0:
        for s in scen:
            r = run_pgbench(server, workdir, SCALE_DIR / f"{s}.sql", clients[s], args.warmup, variables(),
                            tag=f"warm-{s}")
            server.wait_for_clients_gone()
            if r.errors:
                problems.append(f"[{tag}] warm-up {s}: " + "; ".join(r.errors))
            expected[TABLE[s]] += r.txns * per_txn_msgs(s)
    for rnd in range(args.rounds):
        order = scen if rnd % 2 == 0 else list(reversed(scen))
        log(f"[{tag}] round {rnd + 1}/{args.rounds}: {' '.join(order)}")
        for s in order:
            cal = calibrate(server)
            before = snapshot(server, has_io)
            r = run_pgbench(server, workdir, SCALE_DIR / f"{s}.sql", clients[s], args.duration, variables(),
                            tag=f"{s}-{kind}-{size}-{rnd}")
            server.wait_for_clients_gone()
            after = snapshot(server, has_io)
            rec, probs = delta_record(s, r, before, after, has_io)
            rec.update(round=rnd + 1, clients=clients[s], cpu_cal_ms=cal)
            if cgroup is not None:
                rec["cgroup"] = cgroup_stats(cgroup)
            probs = [f"[{tag}] {s} round {rnd + 1}: {p}" for p in probs]
            rec["errors"] = probs
            problems += probs
            expected[TABLE[s]] += r.txns * per_txn_msgs(s)
            step["runs"][s].append(rec)
            log(f"[{tag}]   {s:>13} @{clients[s]} tps {r.tps or 0:9.1f}  p99 {r.p99_ms or 0:7.2f} ms  "
                f"rows {rec['rows_before'] or 0:>11,}  WAL {rec['wal_bytes_per_txn']:7.0f} B/txn  "
                f"reads/txn heap {rec['heap_read_per_txn']:.2f} idx {rec['idx_read_per_txn']:.2f}"
                + (f" io {rec['io_reads_per_txn']:.2f}" if has_io else "")
                + f"  other CPU {(rec['other_cpu_share'] or 0) * 100:.0f}%  cal {cal:.0f} ms"
                + ("  ERR " + "; ".join(probs) if probs else ""))
    if cgroup is not None:
        step["cgroup_at_end"] = cgroup_stats(cgroup)
    step["sizes_end"] = {t: relation_sizes(server, t) for t in tables}
    for t in tables:
        got = step["sizes_end"][t]["rows"]
        if got != expected[t]:
            problems.append(f"[{tag}] {t}: {got} rows at the end, expected {expected[t]} (pre-fill + messages)")
    bad = int(server.value("SELECT (SELECT count(*) FROM idem.keys WHERE state <> 'c') + "
                           "(SELECT count(*) FROM handrolled_keys WHERE status <> 'completed')"))
    if bad:
        problems.append(f"[{tag}] {bad} keys not completed at the end of the step")
    if cgroup is not None:
        server.pg_ctl("stop")
        server.pg_ctl("start")
    return step, problems


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def fmt_big(x, nd=1):
    """fmt, a number of 1,000 or more without decimals."""
    return fmt(x, nd, whole_from=1000)


def summarize_step(step: dict) -> dict:
    out = {}
    for s, runs in step["runs"].items():
        tps = [r["tps"] for r in runs if r["tps"] is not None]
        out[s] = {
            "tps": median(tps), "tps_min": min(tps) if tps else None, "tps_max": max(tps) if tps else None,
            "p99_ms": median([r["p99_ms"] for r in runs]),
            "wal_bytes_per_txn": median([r["wal_bytes_per_txn"] for r in runs]),
            "heap_read_per_txn": median([r["heap_read_per_txn"] for r in runs]),
            "idx_read_per_txn": median([r["idx_read_per_txn"] for r in runs]),
            "io_reads_per_txn": median([r.get("io_reads_per_txn") for r in runs]),
            "disk_kb_read_per_txn": median([r.get("disk_kb_read_per_txn") for r in runs]),
            "rows_first": runs[0]["rows_before"] if runs else None,
            "rows_last": runs[-1]["rows_after"] if runs else None,
        }
    for hand, idem in GROUPS[step["group"]]:
        per_round = []
        for ra in step["runs"][idem]:
            rb = next((x for x in step["runs"][hand] if x["round"] == ra["round"]), None)
            if rb and ra["tps"] and rb["tps"]:
                per_round.append(ra["tps"] / rb["tps"])
        out[f"{idem}/{hand}"] = {"per_round": per_round, "median": median(per_round)}
    return out


def write_charts(out: Path, results: dict) -> list[str]:
    names = []
    colors = {"pg_idem": "#4c78a8", "handrolled": "#f58518", "consume": "#4c78a8", "inbox": "#f58518",
              "consume_batch": "#54a24b", "inbox_batch": "#e45756"}
    charts_spec = [("tps_vs_keys_request.svg", "request path: TPS against keys in the table",
                    ["pg_idem", "handrolled"]),
                   ("tps_vs_keys_inbox.svg", "inbox, one message per transaction: TPS against keys in the table",
                    ["consume", "inbox"]),
                   ("tps_vs_keys_inbox_batch.svg", "inbox, 100 messages per transaction: TPS against keys in the table",
                    ["consume_batch", "inbox_batch"])]
    steps = results.get("steps", [])
    for fname, title, scs in charts_spec:
        series = []
        for s in scs:
            for kind in sorted({st["kind"] for st in steps}):
                for limited in (False, True):
                    pts = []
                    for st in steps:
                        if st["kind"] != kind or st.get("memory_limited", False) != limited or s not in st["runs"]:
                            continue
                        for r in st["runs"][s]:
                            if r["tps"] is None:
                                continue
                            keys = ((r["rows_before"] or 0) + (r["rows_after"] or 0)) / 2
                            pts.append((max(keys, 1000), r["tps"]))
                    if not pts:
                        continue
                    pts.sort()
                    series.append({"name": f"{s}, UUIDv{kind}" + (", memory-limited server" if limited else ""),
                                   "points": pts, "color": colors[s],
                                   "dash": ("6,4" if kind == 7 else None) if not limited else "2,3"})
        if not series:
            continue
        clients = sorted({r["clients"] for st in steps for s in scs for r in st["runs"].get(s, [])})
        svg = charts.line_chart(title, series, "keys in the table during the run (log scale; one point per run)",
                                "transactions per second", xlog=True,
                                note=f"{'/'.join(map(str, clients))} clients, one point per pgbench run")
        (out / fname).write_text(svg)
        names.append(fname)
    return names


def render(out: Path, results: dict) -> None:
    charts_written = write_charts(out, results)
    env = results.get("environment", {})
    L = [f"# pg_idem at scale: {results.get('mode', '')} run", ""]
    L.append(f"`{results.get('command', '')}`, {results.get('started_at', '')} to {results.get('finished_at', '')} "
             f"({(results.get('elapsed_s') or 0) / 60:.0f} min).")
    L.append("")
    so = env.get("pg_idem_so", {})
    L.append(f"- PostgreSQL: {env.get('postgres', 'n/a')}")
    L.append(f"- pg_idem {env.get('pg_idem_version', '?')}: `{so.get('path', '?')}`, {so.get('bytes', '?')} bytes, "
             f"{so.get('profile_guess', '?')}, built {so.get('mtime', '?')}")
    L.append(f"- machine: {env.get('cpus')} CPUs ({env.get('cpu_model')}), {env.get('memory_gib')} GiB RAM, kernel {env.get('kernel')}")
    st = env.get("settings", {})
    a = results.get("args", {})
    L.append(("- settings of the server as started (it did the pre-fill; the memory-limited server below ran "
              f"with `shared_buffers = {a.get('limited_shared_buffers')}`): " if a.get("memory_limit") else "- settings: ")
             + ", ".join(f"`{k} = {v}`" for k, v in st.items()
                                        if k in ("shared_buffers", "shared_preload_libraries", "fsync",
                                                 "synchronous_commit", "max_wal_size", "checkpoint_timeout",
                                                 "pg_idem.purge_interval", "lc_collate", "jit")))
    a = results.get("args", {})
    L.append(f"- pgbench `-M prepared`, 127.0.0.1, {a.get('clients')} clients (batches: {a.get('batch_clients')}), "
             f"{a.get('duration')} s per run, {a.get('rounds')} rounds in ABBA order, {a.get('warmup')} s warm-up "
             f"per scenario after each pre-fill; tables not truncated between rounds of a step")
    if a.get("memory_limit"):
        L.append(f"- **memory-limited**: after the pre-fill the server was stopped, its files evicted from the page "
                 f"cache (posix_fadvise DONTNEED), and it was started again from a shell in the cgroup v1 memory "
                 f"group `{results.get('cgroup')}` with `memory.limit_in_bytes` = {a.get('memory_limit')} and "
                 f"`shared_buffers = {a.get('limited_shared_buffers')}` (the postmaster and every backend in the "
                 f"group; pgbench and psql outside it)")
    L.append("")
    L.append("Key kinds: `bench_uuid()` (bench/scenarios/scale/schema.sql), UUIDv4 (random) or UUIDv7 (time-ordered: the "
             "transaction's `now()` in milliseconds, then random bits). Pre-fill: one statement over "
             "`generate_series` per million rows into each side's table, the two sides in parallel sessions, rows "
             "as the real calls write them: an `INSERT ... SELECT` for the hand-written tables and for request "
             "keys (idem.keys rows copied from a template row written by a real `idem_claim`+`idem_complete`, "
             "with their own tenant, key, timestamps and response body), `idem_consume` itself for consumed "
             f"messages; keys {STEP_US} µs apart ending a minute before the runs, expiry a day later; then `VACUUM "
             "(ANALYZE)` and `CHECKPOINT`. Nothing is purged during the runs (`pg_idem.purge_interval = 0`).")
    L.append("")
    L.append("Reads per transaction: blocks read into shared buffers (from the kernel: page cache or disk) for "
             "the side's table, heap (with its FSM and visibility map forks) and indexes "
             "(`pg_statio_user_tables`/`_indexes`: every process, autovacuum included), and all relation reads "
             "of client backends only in `pg_stat_io` (the business table `payments` included); disk KB/txn is "
             "the machine's whole-disk reads (`/proc/diskstats`) divided by the run's transactions. A heap or "
             "index figure well above the pg_stat_io one comes from an autovacuum that ran during the run "
             "(see the autovacuum count under each step).")
    L.append("")
    for step in results.get("steps", []):
        summ = step.get("summary") or summarize_step(step)
        lim = " (memory-limited server)" if step.get("memory_limited") else ""
        L.append(f"## UUIDv{step['kind']}, {step['group']}, pre-filled with {step['size']:,} keys per side{lim}")
        L.append("")
        if step.get("fill_seconds"):
            L.append("Pre-fill: " + ", ".join(f"{t} {s:.0f} s" for t, s in step["fill_seconds"].items())
                     + f"; VACUUM (ANALYZE) {step.get('vacuum_seconds', 0):.0f} s. shared_buffers {step.get('shared_buffers')}.")
            if step["group"] == "request":
                L.append("Pre-filled pages are packed full on both sides (idem.keys with fillfactor 100 during the "
                         "pre-fill, 95 again for the runs; handrolled_keys has 100): new keys go to new pages ("
                         "15 and 7 of 3,000 to old pages), about as after real calls on pg_idem's side (68) and "
                         "unlike them on the hand-written side (437); the pre-filled heap is denser than one grown by real "
                         "calls (docs/benchmarks.md, *What the pre-fill does not reproduce*).")
            rw = step.get("row_width") or {}
            if rw:
                L.append("Row bytes (`pg_column_size`), a real call's row vs a pre-filled row: "
                         + ", ".join(f"{k} {v}" for k, v in rw.items()) + ".")
            L.append("")
        if step.get("memory_limited"):
            cs, ce = step.get("cgroup_at_start", {}), step.get("cgroup_at_end", {})
            L.append(f"cgroup: limit {cs.get('memory.limit_in_bytes', 0) / 2**30:.2f} GiB; usage at start "
                     f"{cs.get('memory.usage_in_bytes', 0) / 2**20:.0f} MiB, peak {ce.get('memory.max_usage_in_bytes', 0) / 2**20:.0f} MiB, "
                     f"page cache at end {ce.get('stat.cache', 0) / 2**20:.0f} MiB, limit hits (failcnt) {ce.get('memory.failcnt')}; "
                     f"evicted {step.get('evicted_bytes', 0) / 2**30:.2f} GiB of files before the start "
                     f"({(step.get('cached_bytes_after_evict') or 0) / 2**20:.0f} MiB of them still cached after); "
                     f"postmaster's cgroups `{step.get('postmaster_cgroup', '').replace(chr(10), ' ')}`")
            L.append("")
        L.append("| scenario | clients | keys in table (first run → last) | TPS median (min-max) | p99 ms | WAL B/txn | heap reads/txn | index reads/txn | pg_stat_io reads/txn | disk KB/txn |")
        L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for s, runs in step["runs"].items():
            m = summ[s]
            c = runs[0]["clients"] if runs else "?"
            L.append(f"| {s} | {c} | {fmt_big(m['rows_first'])} → {fmt_big(m['rows_last'])} | {fmt_big(m['tps'])} ({fmt_big(m['tps_min'])}-{fmt_big(m['tps_max'])}) | "
                     f"{fmt_big(m['p99_ms'], 2)} | {fmt_big(m['wal_bytes_per_txn'], 0)} | {fmt_big(m['heap_read_per_txn'], 2)} | "
                     f"{fmt_big(m['idx_read_per_txn'], 2)} | {fmt_big(m['io_reads_per_txn'], 2)} | {fmt_big(m['disk_kb_read_per_txn'], 1)} |")
        L.append("")
        for hand, idem in GROUPS[step["group"]]:
            rr = summ.get(f"{idem}/{hand}", {})
            L.append(f"- {idem} / {hand}: **{fmt_big(rr.get('median'), 2)}x** (per round: "
                     + ", ".join(f"{x:.2f}x" for x in rr.get("per_round", [])) + ")")
        L.append("")
        L.append("Sizes (`pg_relation_size` of the heap and of each index, divided by the exact row count):")
        L.append("")
        L.append("| when | table | rows | heap B/key | index B/key | total B/key (with TOAST, FSM, VM) |")
        L.append("|---|---|---:|---:|---|---:|")
        for when in ("sizes_start", "sizes_end"):
            for t, sz in step.get(when, {}).items():
                if not sz["rows"]:
                    continue
                idx = ", ".join(f"{k.split('.')[-1]} {v:.1f}" for k, v in sz["index_per_key"].items())
                L.append(f"| {'after pre-fill' if when == 'sizes_start' else 'end of step'} | {t} | {sz['rows']:,} | "
                         f"{sz['heap_per_key']:.1f} | {idx} | {sz['total_per_key']:.1f} |")
        L.append("")
        noise = [r for runs in step["runs"].values() for r in runs]
        oc = [r.get("other_cpu_share") or 0 for r in noise]
        stl = [r.get("steal_share") or 0 for r in noise]
        cal = [r.get("cpu_cal_ms") for r in noise if r.get("cpu_cal_ms")]
        L.append(f"Noise: other CPU {min(oc) * 100:.0f}-{max(oc) * 100:.0f}%, steal {min(stl) * 100:.0f}-{max(stl) * 100:.0f}%, "
                 f"CPU calibration {min(cal):.0f}-{max(cal):.0f} ms; autovacuum runs during the runs: "
                 f"{sum(r.get('autovacuum_runs', 0) for r in noise)}." if noise and cal else "Noise: n/a")
        L.append("")
    for c in charts_written:
        L.append(f"![{c}]({c})")
        L.append("")
    probs = results.get("problems", [])
    L.append("## Problems")
    L.append("")
    L += [f"- {p}" for p in probs] or ["none: every run worked and every sanity check passed"]
    L.append("")
    (out / "report.md").write_text("\n".join(L) + "\n")


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="pg_idem and the hand-written patterns at growing table sizes")
    p.add_argument("--smoke", action="store_true", help="seconds per run, tiny sizes, no cgroup (< 1 min)")
    p.add_argument("--pg", help="PostgreSQL major version (pg_idem installed into it)")
    p.add_argument("--out", help="output directory (default bench/out/scale)")
    p.add_argument("--kinds", help="key kinds, comma-separated: 4 (UUIDv4), 7 (UUIDv7); default 4,7")
    p.add_argument("--sizes", help="pre-filled keys per side per step, comma-separated (default 0,10000000)")
    p.add_argument("--groups", default="request,inbox", help="request, inbox (default both)")
    p.add_argument("--rounds", type=int, help="rounds per step, ABBA (default 2)")
    p.add_argument("--duration", type=float, help="seconds per pgbench run (default 15)")
    p.add_argument("--warmup", type=float, help="seconds of warm-up per scenario after a pre-fill (default 3)")
    p.add_argument("--clients", type=int, default=None, help="clients of the one-message scenarios (default 8)")
    p.add_argument("--batch-clients", type=int, default=None, help="clients of the batch scenarios (default 2)")
    p.add_argument("--shared-buffers", default="512MB")
    p.add_argument("--memory-limit", help="run the server in a cgroup v1 memory group of this size (e.g. 1G) "
                   "after each pre-fill")
    p.add_argument("--limited-shared-buffers", default="256MB", help="shared_buffers in the memory-limited server")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="extra postgresql.conf line")
    p.add_argument("--data-root", default="/work/bench-data" if os.path.isdir("/work/bench-data") else None,
                   help="where the throwaway data directory goes (default /work/bench-data if it exists, else /tmp)")
    p.add_argument("--render", metavar="RESULTS_JSON", help="only re-render report.md and the SVGs from a results.json")
    a = p.parse_args(argv)
    full = dict(kinds="4,7", sizes="0,10000000", rounds=2, duration=15, warmup=3, clients=8, batch_clients=2,
                out=str(BENCH_DIR / "out" / "scale"))
    smoke = dict(kinds="4,7", sizes="0,10000", rounds=1, duration=1, warmup=0, clients=2, batch_clients=2,
                 out=str(BENCH_DIR / "out" / "scale-smoke"))
    for k, v in (smoke if a.smoke else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.smoke:
        a.memory_limit = None
    a.kinds = [int(x) for x in a.kinds.split(",")]
    a.sizes = [int(x) for x in a.sizes.split(",")]
    a.groups = [g.strip() for g in a.groups.split(",") if g.strip()]
    if set(a.kinds) - {4, 7} or set(a.groups) - set(GROUPS):
        p.error("kinds are 4 and 7; groups are request and inbox")
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
    settings = [
        "shared_preload_libraries = 'pg_idem'",   # counters on, purge worker present
        "pg_idem.purge_interval = 0",             # nothing is purged during the runs
        f"shared_buffers = '{args.shared_buffers}'",
        "max_wal_size = '16GB'", "min_wal_size = '1GB'", "checkpoint_timeout = '30min'",
        "max_connections = 100", "log_checkpoints = on", "log_autovacuum_min_duration = '1s'",
        "log_min_messages = warning", "maintenance_work_mem = '512MB'",
    ]
    for line in args.set:
        name, _, value = line.partition("=")
        settings.append(f"{name.strip()} = '{value.strip()}'")

    interrupt_on_sigterm()
    started = time.time()
    results: dict = {"command": "python3 bench/runners/scale.py " + " ".join(shlex.quote(x) for x in argv),
                     "mode": "smoke" if args.smoke else ("memory-limited" if args.memory_limit else "full"),
                     "started_at": dt.datetime.now().isoformat(timespec="seconds"),
                     "args": {k: v for k, v in vars(args).items()}, "steps": []}
    problems: list[str] = []
    server = ScaleServer(settings, prefix="pg_idem_scale.", data_root=args.data_root)
    workdir = tempfile.mkdtemp(prefix="pg_idem_scale_logs.")
    cgroup = None
    try:
        server.start_logged()
        server.execute((SCENARIO_DIR / "schema.sql").read_text())
        server.execute((SCALE_DIR / "schema.sql").read_text())
        templates(server)
        results["environment"] = environment(server)
        has_io = int(server.value("SHOW server_version_num")) >= 160000
        results["has_pg_stat_io"] = has_io
        if args.memory_limit:
            cgroup = CGROUP_ROOT / f"pg_idem_scale_{os.getpid()}"
            cgroup.mkdir()
            (cgroup / "memory.limit_in_bytes").write_text(args.memory_limit)
            results["cgroup"] = str(cgroup)
        for kind in args.kinds:
            for group in args.groups:
                for size in args.sizes:
                    step, probs = run_step(server, args, workdir, kind, group, size, has_io, cgroup)
                    step["summary"] = summarize_step(step)
                    results["steps"].append(step)
                    problems += probs
                    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    except KeyboardInterrupt:
        problems.append("interrupted")
    except (BenchError, subprocess.TimeoutExpired, OSError) as e:
        problems.append(f"runner error: {e}")
        log(f"error: {e}")
    finally:
        replaced = library_replaced(results)
        if replaced:
            problems.append(f"{replaced} was replaced while the benchmark ran; rerun")
        log("stopping the server")
        server.stop(keep_log_in=out)
        shutil.rmtree(workdir, ignore_errors=True)
        if cgroup is not None:
            for _ in range(50):
                try:
                    cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.2)
            else:
                problems.append(f"could not remove {cgroup}")
    stamp_end(results, started, problems)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    render(out, results)
    log(f"done in {results['elapsed_s']:.0f}s; report: {out / 'report.md'}")
    for step in results["steps"]:
        for k, v in step["summary"].items():
            if "/" in k:
                print(f"  v{step['kind']} {step['size']:>11,} {k:<28} {fmt_big(v['median'], 2)}x  per round "
                      + ", ".join(f"{x:.2f}" for x in v["per_round"]))
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
