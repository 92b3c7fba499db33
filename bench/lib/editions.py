"""The SQL edition beside the hand-written patterns and the native edition, as
bench/runners/sql_edition.py sets them up and the diagnostics that measure the SQL edition
(sql_edition_profile.py, sql_edition_instructions.py) and call_cost.py do too: the groups of
scenarios, the databases, the plain install, each side's tables and counts, and the noise
sampler that counts only the runner's own servers.

Importing this module makes run_pgbench sample with OwnProcessSampler (below).
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import lib
from lib import REPO_DIR, SCENARIO_DIR, BenchError, Server, fill_handrolled, fill_idem

# group -> side -> scenario script; the first side is the hand-written pattern the ratios use
GROUPS = {
    "fresh": {"hand": "handrolled", "plpgsql": "plpgsql", "sql": "pg_idem", "native": "pg_idem"},
    "replay": {"hand": "handrolled_replay", "sql": "replay", "native": "replay"},
    "consume": {"hand": "inbox", "sql": "consume", "native": "consume"},
    "consume_many": {"hand": "inbox_batch", "sql": "consume_batch", "native": "consume_batch"},
}
SCHEMA_NO_EXT = "CREATE EXTENSION IF NOT EXISTS pg_idem;"


# ------------------------------------------------------------------------------------------------
# Noise: lib's CpuSampler counts every process called `postgres` as ours; on a machine where
# others run test servers that hides them. Here "ours" is this runner's servers (the postmasters
# and their children) and the pgbench it started; every other process is noise.
# ------------------------------------------------------------------------------------------------

OUR_POSTMASTERS: set[int] = set()


class OwnProcessSampler(lib.CpuSampler):
    @staticmethod
    def read() -> dict[int, tuple[str, int]]:
        out = {}
        me = os.getpid()
        for pid, (comm, state, ppid, ticks) in lib.proc_stats().items():
            ours = pid in OUR_POSTMASTERS or ppid in OUR_POSTMASTERS or (ppid == me and state != "Z")
            # the base class counts comm "postgres" and "pgbench" as ours: name the others apart
            if not ours and comm in lib.CpuSampler.OURS:
                comm = f"other {comm}"
            elif ours:
                comm = "postgres"
            out[pid] = (comm, ticks)
        return out


lib.CpuSampler = OwnProcessSampler   # run_pgbench samples with it


def remember_postmaster(server: Server) -> None:
    try:
        with open(os.path.join(server.dir, "data", "postmaster.pid")) as f:
            OUR_POSTMASTERS.add(int(f.readline().strip()))
    except (OSError, ValueError):
        pass

# ------------------------------------------------------------------------------------------------
# Databases
# ------------------------------------------------------------------------------------------------

def on_db(server: Server, dbname: str) -> Server:
    """The same server, with every psql / pgbench going to database `dbname`."""
    db = copy.copy(server)
    db.env = dict(server.env, PGDATABASE=dbname)
    return db


def file_info(path: Path) -> dict:
    data = path.read_bytes()
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def generate_sql_edition(workdir: str) -> Path:
    out = Path(workdir) / "sql-edition"
    res = subprocess.run([sys.executable, str(REPO_DIR / "scripts" / "sql_edition.py"), "--out", str(out)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise BenchError(f"scripts/sql_edition.py failed:\n{res.stdout}\n{res.stderr}")
    plain = [Path(p) for p in res.stdout.split() if p.endswith(".sql") and not p.endswith(".tle.sql")]
    if not plain:
        raise BenchError(f"scripts/sql_edition.py wrote no plain install file:\n{res.stdout}")
    return plain[0]


def install_sql_edition(db: Server, path: Path) -> None:
    """The plain install: one transaction, as the role that will own pg_idem (here the bootstrap
    superuser, the same role the native edition's CREATE EXTENSION runs as)."""
    res = subprocess.run(["psql", "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f", str(path)],
                         capture_output=True, text=True, env=db.env, timeout=600)
    if res.returncode != 0:
        raise BenchError(f"installing {path} failed:\n{res.stderr[-3000:]}")


def bench_schema(native: bool) -> str:
    text = (SCENARIO_DIR / "schema.sql").read_text()
    if not native:
        if SCHEMA_NO_EXT not in text:
            raise BenchError(f"bench/scenarios/schema.sql no longer has the line {SCHEMA_NO_EXT!r}")
        text = text.replace(SCHEMA_NO_EXT, "")
    return text


class Side:
    # replay pool filled per database (hand-written and PL/pgSQL reference share database `hand`)
    POOLS: dict[tuple[str, str], int] = {}

    def __init__(self, name: str, db: Server, server_name: str, has_keys: bool):
        self.name, self.db, self.server_name, self.has_keys = name, db, server_name, has_keys
        self.where = (server_name, db.env["PGDATABASE"])

    @property
    def replay_pool(self) -> int:
        return Side.POOLS.get(self.where, 0)

    @replay_pool.setter
    def replay_pool(self, n: int) -> None:
        Side.POOLS[self.where] = n

    def truncate(self) -> None:
        tables = "payments, handrolled_keys, plpgsql_keys, processed_messages" + (", idem.keys" if self.has_keys else "")
        self.db.execute(f"TRUNCATE {tables} RESTART IDENTITY;")
        self.replay_pool = 0

    def fill_replay(self, n: int) -> float:
        """A pool of n completed keys as replay.sql / handrolled_replay.sql find them."""
        self.truncate()
        t0 = time.time()
        if self.has_keys:
            fill_idem(self.db, n, "replay", body=True, lease=None, ttl=None)
            self.db.execute("VACUUM (ANALYZE) idem.keys;")
        else:
            fill_handrolled(self.db, n, "replay", body=True, ttl="24 hours")
            self.db.execute("VACUUM (ANALYZE) handrolled_keys;")
        self.replay_pool = n
        return time.time() - t0

    def lsn(self) -> int:
        return int(float(self.db.value("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")))

    def counts(self) -> dict:
        q = ("SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM handrolled_keys), "
             "(SELECT count(*) FILTER (WHERE status = 'completed') FROM handrolled_keys), "
             "(SELECT count(*) FILTER (WHERE state = 'c') FROM plpgsql_keys), "
             "(SELECT count(*) FROM processed_messages)")
        if self.has_keys:
            q += ", (SELECT count(*) FROM idem.keys), (SELECT count(*) FROM idem.keys WHERE state = 'c')"
        row = [int(x) for x in self.db.rows(q)[0]]
        keys = ["payments", "handrolled", "handrolled_done", "plpgsql_done", "inbox", "keys", "keys_done"]
        return dict(zip(keys, row))

