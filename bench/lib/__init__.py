"""What bench/'s runners and diagnostics share (Python 3.11, standard library only): the throwaway
server, pgbench and its per-transaction log, the noise indicators, the fills, the summaries of
rounds, number formatting and the end of a run (the library check, the exit status).

A runner (bench/runners/) or diagnostic (bench/diagnostics/) puts bench/ first on sys.path and
imports this package: `from lib import Server, ...`. Its modules: charts (the SVG charts),
environment (the machine and the library's build), render (run.py's report), scenario_list
(run.py's scenarios), editions (the SQL edition beside the hand-written patterns and the native
edition, for sql_edition.py, call_cost.py and the diagnostics that measure the SQL edition).
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = BENCH_DIR.parent
SCENARIO_DIR = BENCH_DIR / "scenarios"
PG_SH = REPO_DIR / "scripts" / "lib" / "pg.sh"

# The request fingerprint every scenario sends (hex SHA-256, as a client would compute it).
REQUEST_HASH = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

# A small response body (about 90 bytes of jsonb), the same for pg_idem and the hand-rolled table.
SMALL_BODY = ("jsonb_build_object('payment_id', {i}, 'status', 'succeeded', "
              "'amount_cents', 1000 + {i} % 9000, 'currency', 'EUR')")


# postgresql.conf of run.py's and sql_edition.py's servers, after shared_preload_libraries and
# shared_buffers: fsync and synchronous_commit at their defaults
SERVER_SETTINGS = [
    "max_wal_size = '16GB'",
    "min_wal_size = '1GB'",
    "checkpoint_timeout = '30min'",
    "max_connections = 100",
    "log_checkpoints = on",
    "log_autovacuum_min_duration = '1s'",
    "log_min_messages = warning",
]

FILL_WORKERS = 2           # parallel fill sessions
BATCH = 100                # messages per transaction of inbox_batch / consume_batch (their .sql)


class BenchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(sorted_xs, q):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, int(round(q / 100.0 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[k]


# ------------------------------------------------------------------------------------------------
# The throwaway server
# ------------------------------------------------------------------------------------------------

class Server:
    """A server started and stopped through scripts/lib/pg.sh (pg_start / pg_stop)."""

    def __init__(self, settings: list[str], prefix: str = "pg_idem_bench.", data_root: str | None = None):
        self.settings = settings
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=data_root)
        self.port = None
        self.env = dict(os.environ)

    def start(self) -> None:
        conf_args = " ".join(shlex.quote(s) for s in self.settings)
        script = (f"set -e; source {shlex.quote(str(PG_SH))}; "
                  f"pg_start {shlex.quote(self.dir)} {conf_args}; echo \"PORT=$PGPORT\"")
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180)
        m = re.search(r"^PORT=(\d+)$", res.stdout, re.M)
        if res.returncode != 0 or not m:
            raise BenchError(f"pg_start failed:\n{res.stdout}\n{res.stderr}")
        self.port = int(m.group(1))
        self.env.update(PGHOST="127.0.0.1", PGPORT=str(self.port), PGUSER="postgres",
                        PGDATABASE="postgres", PGAPPNAME="pg_idem_bench")
        for var in ("PGPASSWORD", "PGSERVICE", "PGOPTIONS", "PGSSLMODE"):
            self.env.pop(var, None)

    def start_logged(self) -> None:
        """start(), saying where and on which port."""
        log(f"starting a throwaway server in {self.dir}")
        self.start()
        log(f"server on 127.0.0.1:{self.port}")

    def stop(self, keep_log_in: Path | None = None) -> None:
        if keep_log_in is not None:
            try:
                shutil.copy(os.path.join(self.dir, "server.log"), keep_log_in / "server.log")
            except OSError:
                pass
        script = f"source {shlex.quote(str(PG_SH))}; pg_stop {shlex.quote(self.dir)}"
        subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180)

    # -- SQL helpers ----------------------------------------------------------------------------

    def psql(self, sql: str, timeout: float = 3600) -> subprocess.CompletedProcess:
        res = subprocess.run(
            ["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-f", "-"],
            input=sql, capture_output=True, text=True, env=self.env, timeout=timeout)
        if res.returncode != 0:
            raise BenchError(f"psql failed ({res.returncode}):\n{sql[:2000]}\n--\n{res.stderr}")
        return res

    def rows(self, sql: str) -> list[list[str]]:
        out = self.psql(sql).stdout
        return [line.split("\t") for line in out.splitlines() if line != ""]

    def value(self, sql: str) -> str:
        rows = self.rows(sql)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise BenchError(f"expected one value from {sql!r}, got {rows!r}")
        return rows[0][0]

    def execute(self, sql: str, timeout: float = 3600) -> str:
        """Runs a script; returns stderr (NOTICEs)."""
        return self.psql(sql, timeout=timeout).stderr

    def wait_for_clients_gone(self, timeout: float = 15.0) -> None:
        """pgbench's backends flush their statistics when they exit; wait for that."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            n = int(self.value("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                               "AND pid <> pg_backend_pid()"))
            if n == 0:
                return
            time.sleep(0.1)
        log("warning: client backends still present after pgbench ended")


# ------------------------------------------------------------------------------------------------
# pgbench
# ------------------------------------------------------------------------------------------------

class PgbenchResult:
    def __init__(self):
        self.tps = None
        self.txns = 0
        self.failed = 0
        self.latencies_us: list[int] = []      # sorted
        self.records: list[tuple[float, int]] = []  # (end epoch seconds, latency us)
        self.p50_ms = None
        self.p99_ms = None
        self.errors: list[str] = []
        self.duration = 0.0
        self.cpu: dict = {}


def proc_stats() -> dict[int, tuple[str, str, int, int]]:
    """Every process's name, state, parent pid and CPU ticks (user + system), from /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
        except OSError:
            continue
        r = data.rfind(")")
        comm = data[data.find("(") + 1:r]
        fields = data[r + 2:].split()
        out[int(name)] = (comm, fields[0], int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


class CpuSampler(threading.Thread):
    """Samples /proc every half second during a run and adds up the CPU time of processes other
    than the server and pgbench (a compiler, another benchmark...): a noise indicator, reported as
    a share of the machine. Processes that end between two samples lose at most half a second."""

    OURS = ("postgres", "pgbench")

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval = interval
        self.stop_event = threading.Event()
        self.seen: dict[int, int] = {}
        self.other_ticks = 0
        self.our_ticks = 0
        self.top: dict[str, int] = {}
        self.t0 = self.t1 = 0.0
        self.me = os.getpid()

    @staticmethod
    def read() -> dict[int, tuple[str, int]]:
        return {pid: (comm, ticks) for pid, (comm, _, _, ticks) in proc_stats().items()}

    def sample(self, first: bool) -> None:
        for pid, (comm, ticks) in self.read().items():
            if pid == self.me:
                continue
            prev = self.seen.get(pid)
            self.seen[pid] = ticks
            if first:
                continue
            delta = ticks - (prev if prev is not None else 0)
            if delta <= 0:
                continue
            if comm in self.OURS:
                self.our_ticks += delta
            else:
                self.other_ticks += delta
                self.top[comm] = self.top.get(comm, 0) + delta

    @staticmethod
    def steal() -> int:
        try:
            with open("/proc/stat") as f:
                fields = f.readline().split()
            return int(fields[8]) if len(fields) > 8 else 0
        except OSError:
            return 0

    def run(self) -> None:
        self.t0 = time.time()
        self.steal0 = self.steal()
        self.sample(first=True)
        while not self.stop_event.wait(self.interval):
            self.sample(first=False)
        self.sample(first=False)
        self.steal1 = self.steal()
        self.t1 = time.time()

    def finish(self) -> dict:
        self.stop_event.set()
        self.join()
        hz = os.sysconf("SC_CLK_TCK")
        capacity = max(1e-9, (self.t1 - self.t0) * hz * (os.cpu_count() or 1))
        top = sorted(self.top.items(), key=lambda kv: -kv[1])[:3]
        return {"other_cpu_share": self.other_ticks / capacity, "our_cpu_share": self.our_ticks / capacity,
                "steal_share": (self.steal1 - self.steal0) / capacity,
                "other_top": [f"{c} {t / hz:.1f}s" for c, t in top]}


def run_pgbench(server: Server, workdir: str, script: Path, clients: int, seconds: float,
                variables: dict | None = None, rate: float | None = None,
                keep_records: bool = False, tag: str = "run") -> PgbenchResult:
    prefix_dir = tempfile.mkdtemp(prefix=f"{tag}.", dir=workdir)
    prefix = os.path.join(prefix_dir, "pgbench_log")
    threads = max(1, min(clients, 2, os.cpu_count() or 1))
    cmd = ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", str(threads),
           "-T", str(int(round(seconds))), "-f", str(script), "--log", f"--log-prefix={prefix}"]
    if rate:
        cmd += ["-R", str(rate)]
    for k, v in (variables or {}).items():
        cmd += ["-D", f"{k}={v}"]
    r = PgbenchResult()
    sampler = CpuSampler()
    sampler.start()
    t0 = time.time()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=server.env,
                             timeout=seconds + 300)
    finally:
        r.cpu = sampler.finish()
    r.duration = time.time() - t0
    out = res.stdout
    m = re.search(r"^tps = ([0-9.]+)", out, re.M)
    r.tps = float(m.group(1)) if m else None
    m = re.search(r"^number of transactions actually processed: (\d+)", out, re.M)
    r.txns = int(m.group(1)) if m else 0
    m = re.search(r"^number of failed transactions: (\d+)", out, re.M)
    r.failed = int(m.group(1)) if m else 0
    if res.returncode != 0:
        r.errors.append(f"pgbench exited with {res.returncode}")
    if r.failed:
        r.errors.append(f"{r.failed} failed transactions")
    if r.tps is None or r.txns == 0:
        r.errors.append("no tps / no transactions reported")
    err_lines = [ln for ln in res.stderr.splitlines()
                 if ln.strip() and not ln.startswith("pgbench (")]
    if r.errors and err_lines:
        r.errors.append("stderr: " + " | ".join(err_lines[:5]))
    lat = []
    for path in glob.glob(prefix + "*"):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6:
                    continue
                us = int(parts[2])
                lat.append(us)
                if keep_records:
                    r.records.append((int(parts[4]) + int(parts[5]) / 1e6, us))
    shutil.rmtree(prefix_dir, ignore_errors=True)
    lat.sort()
    r.latencies_us = lat
    if lat:
        r.p50_ms = percentile(lat, 50) / 1000.0
        r.p99_ms = percentile(lat, 99) / 1000.0
    elif not r.errors:
        r.errors.append("no per-transaction log lines")
    return r


def split_range(lo: int, hi: int, parts: int):
    n = hi - lo + 1
    step = (n + parts - 1) // parts
    out = []
    a = lo
    while a <= hi:
        b = min(hi, a + step - 1)
        out.append((a, b))
        a = b + 1
    return out


def in_parallel(fn, items) -> None:
    """fn(item) for every item, each in a thread of its own; raises the first error."""
    errors = []

    def work(item):
        try:
            fn(item)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(item,)) for item in items]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def fill_keys(server: Server, n: int, tag: str, declare: str, per_key: str) -> float:
    """Runs `per_key` (PL/pgSQL, with i, tenant t and key k set) for keys 1..n, one key per
    transaction as an application does it (so page pruning sees the same pattern as in
    production), in FILL_WORKERS sessions with synchronous_commit off (that changes no byte on
    disk). Tenant and key are those replay.sql computes for the tag 'replay'. Returns keys per
    second."""
    scripts = []
    for lo, hi in split_range(1, n, FILL_WORKERS):
        scripts.append(f"""
SET synchronous_commit = off;
DO $do$
DECLARE t text; k text; {declare}
BEGIN
  FOR i IN {lo}..{hi} LOOP
    t := 't' || (i % 100 + 1);
    k := md5('{tag}/' || i)::uuid::text;
    {per_key}
    COMMIT;
  END LOOP;
END
$do$;
""")
    t0 = time.time()
    in_parallel(server.execute, scripts)
    return n / max(1e-9, time.time() - t0)


def fill_idem(server: Server, n: int, tag: str, body: bool, lease: str | None, ttl: str | None) -> float:
    """n completed keys through idem_claim + idem_complete (see fill_keys)."""
    lease_sql = f"interval '{lease}'" if lease else "NULL"
    ttl_sql = f"interval '{ttl}'" if ttl else "NULL"
    body_sql = SMALL_BODY.format(i="i") if body else "NULL::jsonb"
    return fill_keys(server, n, tag, "f bigint;", f"""
    SELECT c.fence INTO f FROM idem_claim(t, k, '{REQUEST_HASH}', {lease_sql}, {ttl_sql}) AS c;
    PERFORM idem_complete(t, k, f, 200, {body_sql});""")


def fill_handrolled(server: Server, n: int, tag: str, body: bool, ttl: str) -> float:
    """n keys through the hand-rolled lifecycle (INSERT .. ON CONFLICT DO NOTHING, then the
    UPDATE storing the response), see fill_keys."""
    body_sql = SMALL_BODY.format(i="i") if body else "NULL::jsonb"
    return fill_keys(server, n, tag, "", f"""
    INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at)
    VALUES (t, k, '{REQUEST_HASH}', 'in_progress', now() + interval '{ttl}')
    ON CONFLICT DO NOTHING;
    UPDATE handrolled_keys SET status = 'completed', response_code = 200, response_body = {body_sql}
     WHERE tenant = t AND key = k;""")


CALIBRATION_SQL = "n := (SELECT count(*) FROM generate_series(1, 1000000));"


def calibrate(server: Server) -> float:
    """Milliseconds of a fixed CPU-bound query in one backend, taken before every run: if it
    drifts, the machine's speed drifted (noisy neighbours, shared cores), even when neither
    other processes nor steal time show it."""
    best = None
    for _ in range(3):
        _, secs = timed_notice(server, CALIBRATION_SQL)
        best = secs if best is None else min(best, secs)
    return best * 1000.0


def timed_notice(server: Server, body: str) -> tuple[int, float]:
    """Runs `n := <body>` in a DO block; returns (n, seconds) measured by the server."""
    err = server.execute(f"""
DO $do$
DECLARE t0 timestamptz := clock_timestamp(); n bigint;
BEGIN
  {body}
  RAISE NOTICE 'RESULT % %', n, extract(epoch FROM clock_timestamp() - t0);
END
$do$;
""")
    m = re.search(r"RESULT (\d+) ([0-9.]+)", err)
    if not m:
        raise BenchError(f"no RESULT notice in: {err}")
    return int(m.group(1)), float(m.group(2))


def use_pg(major: str) -> None:
    """Every tool this runner starts (pg.sh, psql, pgbench) comes from PostgreSQL `major`."""
    bindir = subprocess.run(
        ["bash", "-c", f'source "{REPO_DIR}/scripts/lib/versions.sh" && pg_bindir "$1"', "-", major],
        check=True, capture_output=True, text=True).stdout.strip()
    if not Path(bindir, "pg_config").exists():
        raise BenchError(f"PostgreSQL {major} is not installed at {bindir}: run scripts/setup.sh {major}")
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    os.environ["PG_CONFIG"] = str(Path(bindir, "pg_config"))
    os.environ["PG_BINDIR"] = bindir


# ------------------------------------------------------------------------------------------------
# Summaries and numbers
# ------------------------------------------------------------------------------------------------

def summarize_rounds(recs: list[dict], medians: list[str]) -> dict:
    """One scenario's rounds: how many, TPS (median, min, max of the rounds that gave one) and the
    median of each field in `medians` over those rounds."""
    ok = [r for r in recs if r["tps"] is not None]
    s = {
        "rounds": len(recs),
        "tps": median([r["tps"] for r in ok]),
        "tps_min": min((r["tps"] for r in ok), default=None),
        "tps_max": max((r["tps"] for r in ok), default=None),
    }
    for name in medians:
        s[name] = median([r.get(name) for r in ok])
    return s


def summarize_noise(recs: list[dict]) -> dict:
    """The noise indicators of one scenario's rounds (CpuSampler, calibrate): the worst other CPU
    and steal shares, the median calibration."""
    return {
        "other_cpu_max": max((r.get("other_cpu_share") or 0 for r in recs), default=0),
        "steal_max": max((r.get("steal_share") or 0 for r in recs), default=0),
        "cal_ms": median([r.get("cpu_cal_ms") for r in recs]),
    }


def fmt(x, nd=1, unit="", whole_from=None):
    """x with thousands separators and nd decimals, "n/a" for None; an int without decimals, and a
    float of at least `whole_from` (when given) too."""
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if whole_from is not None and abs(x) >= whole_from:
            return f"{x:,.0f}{unit}"
        return f"{x:,.{nd}f}{unit}"
    return f"{x:,}{unit}"


# ------------------------------------------------------------------------------------------------
# The end of a run
# ------------------------------------------------------------------------------------------------

def check_tools(tools=("psql", "pgbench", "bash")) -> None:
    """BenchError when one of `tools` is not in PATH."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found in PATH")


def conf_lines(sets: list[str]) -> list[str]:
    """postgresql.conf lines from --set NAME=VALUE options (quotes around VALUE dropped); BenchError
    for one without '='."""
    lines = []
    for line in sets:
        name, eq, value = line.partition("=")
        if not eq:
            raise BenchError(f"--set wants NAME=VALUE, got {line!r}")
        lines.append(f"{name.strip()} = '{value.strip().strip(chr(39))}'")
    return lines


def interrupt_on_sigterm() -> None:
    """SIGTERM ends a run as Ctrl-C does (KeyboardInterrupt): the servers are stopped, the report
    written."""
    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)


def library_replaced(results: dict) -> str | None:
    """The path of pg_idem.so when it is no longer the file environment() recorded at the start
    (a server that preloads it crashes or mixes builds), else None."""
    so = results.get("environment", {}).get("pg_idem_so", {})
    try:
        st = os.stat(so.get("path", ""))
    except OSError:
        return None
    if so.get("bytes") is not None and (st.st_size != so["bytes"] or dt.datetime.fromtimestamp(
            st.st_mtime).isoformat(timespec="seconds") != so.get("mtime")):
        return so["path"]
    return None


def stamp_end(results: dict, started: float, problems: list[str]) -> None:
    """Records in results when the run finished, how long it took and its problems."""
    results["finished_at"] = dt.datetime.now().isoformat(timespec="seconds")
    results["elapsed_s"] = time.time() - started
    results["problems"] = problems


def exit_status(problems: list[str]) -> int:
    """Prints the problems of a run, if any, and returns the runner's exit status."""
    if problems:
        print("\nFAILED:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    return 0
