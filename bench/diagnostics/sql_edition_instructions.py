#!/usr/bin/env python3
"""CPU instructions per transaction of the server, counted by valgrind (callgrind): the SQL
edition against the hand-written patterns, the same on a busy machine as on a quiet one
(Python 3.11, standard library only; needs valgrind).

    python3 bench/diagnostics/sql_edition_instructions.py --pg 17
    python3 bench/diagnostics/sql_edition_instructions.py --pg 17 --variant opt=/tmp/pg_idem--0.6.0.sql --n 300
    python3 bench/diagnostics/sql_edition_instructions.py --smoke     # the test command: consume only, 10 transactions
    python3 bench/diagnostics/sql_edition_instructions.py --pg 15 --native --n 300   # and the native edition
    python3 bench/diagnostics/sql_edition_instructions.py --pg 15 --guard bench/report/native-instructions-pg15-debug.json
    python3 bench/diagnostics/sql_edition_instructions.py --pg 15 --groups consume --profile /tmp/prof   # then bench/diagnostics/profile_diff.py

TPS on a shared 2-core VM moves by 20% from one minute to the next; a change of a few percent
in what a call costs is lost in it. A count of instructions is not: it is what the backend
executes, whoever else runs. It leaves out what the backend waits for (the WAL flush, the
client) and what happens outside it (the kernel's sockets, pgbench), so it says what a change
saves, not what TPS a machine gets.

How: a throwaway data directory (initdb; bench/scenarios/schema.sql without its CREATE EXTENSION in
database `hand`, the SQL edition's plain install file in database `sqled`, each --variant in
`sqled_LABEL`), then for each database and scenario one backend in single-user mode (`postgres
--single`, no client, no network) under `valgrind --tool=callgrind`, reading a script of
prepared statements run as pgbench runs bench/scenarios/*.sql (BEGIN, the statements, COMMIT;
replay: one statement per transaction over a pool of 500 completed keys). It runs once with 50
warm-up transactions and once with 50 + N; the difference divided by N is a transaction's
instructions, start-up and warm-up left out. synchronous_commit is off (no instruction counts
a wait). Single-user mode parses each line (EXECUTE of a prepared statement: the same small
cost for every side) and prints the rows it returns. consume_many: 100 messages per transaction,
N / 10 transactions. Takes about 3 minutes.

--native adds database `native` (CREATE EXTENSION pg_idem, as installed), counted with
shared_preload_libraries = 'pg_idem' as the README recommends. --guard FILE counts the native
edition's paths FILE names and fails when one costs more than FILE's tolerance above its count
there: the native edition's regression guard (the test command runs it on the build it installs;
--write-guard FILE writes FILE from this run). A count depends on the build (a debug build
executes several times a release build's instructions) and on the PostgreSQL version, so FILE
says which it was measured with and the guard refuses another.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import PG_SH, REQUEST_HASH, BenchError, Server, use_pg  # noqa: E402
from lib.editions import bench_schema, file_info, generate_sql_edition, install_sql_edition, on_db  # noqa: E402

H = REQUEST_HASH
BODY = "jsonb_build_object('payment_id', 1::bigint, 'status', 'succeeded', 'amount_cents', $3::bigint)"
PAY = "PREPARE p(text, text, int) AS INSERT INTO payments (tenant, idem_key, amount_cents, currency) VALUES ($1, $2, $3, 'EUR') RETURNING id;\n"
# (prepared statements, per-transaction lines) per scenario; {t} tenant, {k} key, {i} number
SCENARIOS = {
    "handrolled": (
        f"PREPARE c(text, text) AS INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at) "
        f"VALUES ($1, $2, '{H}', 'in_progress', now() + interval '24 hours') ON CONFLICT DO NOTHING RETURNING key;\n" + PAY +
        f"PREPARE f(text, text, int) AS UPDATE handrolled_keys SET status = 'completed', response_code = 201, "
        f"response_body = {BODY} WHERE tenant = $1 AND key = $2 RETURNING response_code;\n",
        "BEGIN;\nEXECUTE c('{t}', '{k}');\nEXECUTE p('{t}', '{k}', {i});\nEXECUTE f('{t}', '{k}', {i});\nCOMMIT;\n"),
    "plpgsql": (
        f"PREPARE c(text, text) AS SELECT c.fence, 1 / (c.outcome = 'claimed')::int FROM plpgsql_claim($1, $2, '{H}') AS c;\n" + PAY +
        f"PREPARE f(text, text, int) AS SELECT plpgsql_complete($1, $2, (SELECT k.fence FROM plpgsql_keys AS k "
        f"WHERE k.tenant = $1 AND k.key = $2), 201, {BODY});\n",
        "BEGIN;\nEXECUTE c('{t}', '{k}');\nEXECUTE p('{t}', '{k}', {i});\nEXECUTE f('{t}', '{k}', {i});\nCOMMIT;\n"),
    "pg_idem": (
        f"PREPARE c(text, text) AS SELECT c.fence, 1 / (c.outcome = 'claimed')::int FROM idem_claim($1, $2, '{H}') AS c;\n" + PAY +
        # the fence as pgbench hands it over (\gset), looked up here: the same small cost as in plpgsql
        f"PREPARE f(text, text, int) AS SELECT idem_complete($1, $2, (SELECT k.fence FROM idem.keys AS k "
        f"WHERE k.tenant = $1 AND k.key = $2), 201, {BODY});\n",
        "BEGIN;\nEXECUTE c('{t}', '{k}');\nEXECUTE p('{t}', '{k}', {i});\nEXECUTE f('{t}', '{k}', {i});\nCOMMIT;\n"),
    "inbox": (
        "PREPARE c(text, text) AS INSERT INTO processed_messages (subscriber_id, message_id) VALUES ($1, $2) "
        "ON CONFLICT DO NOTHING RETURNING message_id;\n" + PAY,
        "BEGIN;\nEXECUTE c('{t}', '{k}');\nEXECUTE p('{t}', '{k}', {i});\nCOMMIT;\n"),
    "consume": (
        "PREPARE c(text, text) AS SELECT 1 / idem_consume($1, $2)::int;\n" + PAY,
        "BEGIN;\nEXECUTE c('{t}', '{k}');\nEXECUTE p('{t}', '{k}', {i});\nCOMMIT;\n"),
    "inbox_batch": (
        "PREPARE c(text, text, int) AS WITH new AS (INSERT INTO processed_messages (subscriber_id, message_id) "
        "SELECT $1, m FROM unnest(ARRAY(SELECT $2 || '-' || g FROM generate_series(1, 100) AS g)) AS m "
        "ON CONFLICT DO NOTHING RETURNING message_id), paid AS (INSERT INTO payments (tenant, idem_key, amount_cents, "
        "currency) SELECT $1, message_id, $3, 'EUR' FROM new RETURNING 1) SELECT 1 / (count(*) = 100)::int FROM paid;\n",
        "BEGIN;\nEXECUTE c('{t}', '{k}', {i});\nCOMMIT;\n"),
    "consume_batch": (
        "PREPARE c(text, text, int) AS WITH new AS (SELECT * FROM idem_consume_many($1, "
        "ARRAY(SELECT $2 || '-' || g FROM generate_series(1, 100) AS g)) AS m(message_id)), paid AS (INSERT INTO "
        "payments (tenant, idem_key, amount_cents, currency) SELECT $1, message_id, $3, 'EUR' FROM new RETURNING 1) "
        "SELECT 1 / (count(*) = 100)::int FROM paid;\n",
        "BEGIN;\nEXECUTE c('{t}', '{k}', {i});\nCOMMIT;\n"),
    # a message delivered again: one statement per transaction over a pool of 500 processed ones
    "inbox_redelivery": (
        "PREPARE c(int) AS WITH new AS (INSERT INTO processed_messages (subscriber_id, message_id) "
        "VALUES ('t' || ($1 % 100 + 1), 'redelivered/' || $1) ON CONFLICT DO NOTHING RETURNING 1) "
        "SELECT 1 / (NOT EXISTS (SELECT FROM new))::int;\n",
        "EXECUTE c({j});\n"),
    "consume_redelivery": (
        "PREPARE c(int) AS SELECT 1 / (NOT idem_consume('t' || ($1 % 100 + 1), 'redelivered/' || $1))::int;\n",
        "EXECUTE c({j});\n"),
    "handrolled_replay": (
        f"PREPARE r(int) AS WITH s AS (SELECT 't' || ($1 % 100 + 1) AS tenant, md5('replay/' || $1)::uuid::text AS k), "
        f"ins AS (INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at) SELECT s.tenant, s.k, '{H}', "
        f"'in_progress', now() + interval '24 hours' FROM s ON CONFLICT DO NOTHING RETURNING key) "
        f"SELECT h.response_code, h.response_body, 1 / (h.status = 'completed' AND h.request_hash = '{H}' "
        f"AND NOT EXISTS (SELECT FROM ins))::int FROM s JOIN handrolled_keys h ON h.tenant = s.tenant AND h.key = s.k;\n",
        "EXECUTE r({j});\n"),
    "replay": (
        f"PREPARE r(int) AS SELECT c.response_code, c.response_body, 1 / (c.outcome = 'completed')::int "
        f"FROM (SELECT 't' || ($1 % 100 + 1) AS tenant, md5('replay/' || $1)::uuid::text AS k) AS s, "
        f"LATERAL idem_claim(s.tenant, s.k, '{H}') AS c;\n",
        "EXECUTE r({j});\n"),
}
HAND = {"handrolled", "plpgsql", "inbox", "inbox_batch", "handrolled_replay", "inbox_redelivery"}
PAIRS = [("fresh", "handrolled", "pg_idem"), ("fresh (reference)", "plpgsql", None),
         ("consume", "inbox", "consume"), ("consume_many, 100 messages", "inbox_batch", "consume_batch"),
         ("replay", "handrolled_replay", "replay"), ("redelivery", "inbox_redelivery", "consume_redelivery")]
POOL = 500


def prologue(scenario: str, edition: bool) -> str:
    # the same draws of random() in every run (the SQL edition's purge in passing, 1 call in 8)
    return "SELECT pg_catalog.setseed(0.5);\n" + _prologue(scenario, edition)


def _prologue(scenario: str, edition: bool) -> str:
    if scenario == "replay":
        return ("TRUNCATE idem.keys;\n"
                f"DO $$ DECLARE f bigint; BEGIN FOR i IN 1..{POOL} LOOP SELECT c.fence INTO f FROM idem_claim("
                f"'t' || (i % 100 + 1), md5('replay/' || i)::uuid::text, '{H}') AS c; PERFORM idem_complete("
                f"'t' || (i % 100 + 1), md5('replay/' || i)::uuid::text, f, 200, jsonb_build_object('payment_id', i, "
                f"'status', 'succeeded')); END LOOP; END $$;\nVACUUM ANALYZE idem.keys;\n")
    if scenario in ("inbox_redelivery", "consume_redelivery"):
        target = ("DO $$ BEGIN FOR i IN 1..{n} LOOP PERFORM idem_consume('t' || (i % 100 + 1), 'redelivered/' || i); "
                  "END LOOP; END $$;\nVACUUM ANALYZE idem.keys;\n" if edition else
                  "INSERT INTO processed_messages (subscriber_id, message_id) SELECT 't' || (i % 100 + 1), "
                  "'redelivered/' || i FROM generate_series(1, {n}) i;\nVACUUM ANALYZE processed_messages;\n")
        return ("TRUNCATE processed_messages" + (", idem.keys" if edition else "") + ";\n" + target.format(n=POOL))
    if scenario == "handrolled_replay":
        return ("TRUNCATE handrolled_keys;\nINSERT INTO handrolled_keys (tenant, key, request_hash, status, "
                f"response_code, response_body, expires_at) SELECT 't' || (i % 100 + 1), md5('replay/' || i)::uuid::text, "
                f"'{H}', 'completed', 200, jsonb_build_object('payment_id', i, 'status', 'succeeded'), "
                f"now() + interval '1 day' FROM generate_series(1, {POOL}) i;\nVACUUM ANALYZE handrolled_keys;\n")
    return ("TRUNCATE payments, handrolled_keys, processed_messages, plpgsql_keys" + (", idem.keys" if edition else "")
            + " RESTART IDENTITY;\n")


def count(datadir: str, db: str, scenario: str, n: int, edition: bool, workdir: str,
          preload: bool = False, keep: Path | None = None) -> tuple[int, list[str]]:
    """Instructions of one single-user backend running 50 + n transactions of `scenario`."""
    prep, line = SCENARIOS[scenario]
    body = "".join(line.format(t=f"t{i % 100 + 1}", k=f"{scenario}-{n}-{i}", i=i, j=i % POOL + 1)
                   for i in range(50 + n))
    script = Path(workdir, f"{db}-{scenario}-{n}.sql")
    script.write_text(prologue(scenario, edition) + prep + body)
    out = Path(workdir, f"{db}-{scenario}-{n}.callgrind")
    bindir = os.environ.get("PG_BINDIR") or subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(PG_SH))}; echo $PG_BINDIR"], capture_output=True, text=True).stdout.strip()
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"{bindir}/postgres", "--single",
           "-D", datadir, "-c", "synchronous_commit=off", "-c", "jit=off"]
    # the native edition as the README runs it; nothing of pg_idem loaded for the other databases
    cmd += ["-c", "shared_preload_libraries=pg_idem", db] if preload else [db]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    with open(script) as stdin:
        # valgrind's own temporary files go to TMPDIR: the work directory, which the postgres user
        # may write (/tmp need not be writable by it)
        res = subprocess.run(cmd, stdin=stdin, capture_output=True, text=True, timeout=3600,
                             env={**os.environ, "TMPDIR": workdir})
    errors = [ln for ln in (res.stdout + res.stderr).splitlines() if "ERROR" in ln]
    m = re.search(r"^summary: (\d+)", out.read_text(), re.M) if out.exists() else None
    if not m:
        raise BenchError(f"callgrind wrote no summary for {db}/{scenario}:\n{res.stderr[-2000:]}")
    if keep:    # --profile: the run's whole profile, for callgrind_annotate
        shutil.move(str(out), keep / f"{db}-{scenario}-{n}.callgrind")
    else:
        out.unlink()
    script.unlink()
    return int(m.group(1)), errors


def installed_library() -> Path:
    """The installed pg_idem library: which build the native counts are of."""
    libdir = subprocess.run(["bash", "-c", f"source {shlex.quote(str(PG_SH))}; \"$PG_BINDIR/pg_config\" --pkglibdir"],
                            capture_output=True, text=True, check=True).stdout.strip()
    return Path(libdir, "pg_idem.so")


def write_guard(path: Path, native: dict, args, major: str, library: str) -> None:
    path.write_text(json.dumps({
        "what": "k server instructions per transaction of the native edition (bench/diagnostics/sql_edition_instructions.py)",
        "measured": time.strftime("%Y-%m-%d"),
        "command": "python3 bench/diagnostics/sql_edition_instructions.py --pg {} --n {} --groups {} --write-guard {}".format(
            major, args.n, args.groups or "fresh,consume,consume_many,replay", path),
        "postgresql": major,
        "build": args.build,
        "library_sha256": library,
        "transactions": args.n,
        "groups": sorted({g.split()[0].rstrip(",") for g, _, e in PAIRS if e in native}),
        "tolerance": 0.02,
        "k_instructions": {k: round(v, 1) for k, v in native.items()},
    }, indent=2) + "\n")
    print(f"\nwrote {path}")


def check_guard(guard: dict, native: dict, major: str, library: str) -> int:
    """0 when every native count is within the guard's tolerance of its own, else 1."""
    print(f"\nnative guard ({guard['build']} build sha256 {guard['library_sha256'][:12]}, measured "
          f"{guard['measured']}, tolerance {guard['tolerance']:.0%}; this library sha256 {library[:12]}):")
    worse = []
    for scenario, then in guard["k_instructions"].items():
        now = native[scenario]
        ratio = now / then
        print(f"  {scenario}: {now:,.1f}k now, {then:,.1f}k then ({ratio:.3f}x)")
        if ratio > 1 + guard["tolerance"]:
            worse.append(scenario)
    if worse:
        print(f"error: the native edition executes more instructions than the guard allows: {', '.join(worse)}"
              f" (if that is the price of a change, say so and measure again with --write-guard)", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pg")
    p.add_argument("--n", type=int, default=300, help="transactions counted per scenario (default 300)")
    p.add_argument("--sql-file", help="the SQL edition's plain install file (default: scripts/sql_edition.py's)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=FILE")
    p.add_argument("--groups", help="only these groups, comma-separated (fresh, consume, consume_many, replay)")
    p.add_argument("--smoke", action="store_true", help="the test command's run: --n 10 --groups consume")
    p.add_argument("--native", action="store_true", help="count the native edition too (database native)")
    p.add_argument("--guard", metavar="FILE", help="fail when a native count exceeds FILE's by its tolerance")
    p.add_argument("--write-guard", metavar="FILE", help="write the native counts of this run to FILE")
    p.add_argument("--profile", metavar="DIR", help="keep each counted run's callgrind profile in DIR "
                   "(the runs with 0 and with N transactions after the warm-up: bench/diagnostics/profile_diff.py)")
    p.add_argument("--build", default="debug", help="what --write-guard records the build as (default debug)")
    args = p.parse_args(argv)
    if args.smoke:
        args.n, args.groups = 10, "consume"
    guard = json.loads(Path(args.guard).read_text()) if args.guard else None
    if guard:
        args.native = True
        # the guard's own paths and number of transactions: counts are only compared like for like
        args.n, args.groups = guard["transactions"], ",".join(guard["groups"])
    if args.write_guard:
        args.native = True
    pairs = PAIRS
    if args.groups:
        wanted = {g.strip() for g in args.groups.split(",") if g.strip()}
        pairs = [pair for pair in PAIRS if pair[0].split()[0].rstrip(",") in wanted]
        unknown = wanted - {pair[0].split()[0].rstrip(",") for pair in PAIRS}
        if unknown:
            print(f"unknown group(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    if shutil.which("valgrind") is None:
        print("valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.pg:
        use_pg(args.pg)
    keep = Path(args.profile).resolve() if args.profile else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="pg_idem_sqled_instr.")
    os.chmod(workdir, 0o777)
    server = Server(["jit = off"])
    dbs = {}
    try:
        path = None if guard else Path(args.sql_file).resolve() if args.sql_file else generate_sql_edition(workdir)
        files = [("sqled", path)] + [(f"sqled_{v.partition('=')[0].lower()}", Path(v.partition('=')[2]).resolve())
                                     for v in args.variant]
        if guard:   # the native edition alone
            files = []
        server.start()
        major = server.value("SHOW server_version_num")[:-4]
        if guard and major != guard["postgresql"]:
            raise BenchError(f"the guard was measured on PostgreSQL {guard['postgresql']}, this is {major}")
        server.execute("CREATE DATABASE hand;")
        on_db(server, "hand").execute(bench_schema(native=False))
        for db, f in files:
            server.execute(f"CREATE DATABASE {db};")
            install_sql_edition(on_db(server, db), f)
            on_db(server, db).execute(bench_schema(native=False))
            dbs[db] = file_info(f)
        if args.native:
            server.execute("CREATE DATABASE native;")
            on_db(server, "native").execute(bench_schema(native=True))
            dbs["native"] = file_info(installed_library())
        # single-user mode needs the server stopped: stop it, keep its data directory
        subprocess.run(["bash", "-c", f"source {shlex.quote(str(PG_SH))}; pg_run \"$PG_BINDIR/pg_ctl\" -D "
                        f"{shlex.quote(server.dir)}/data -m fast -w stop"], check=True, capture_output=True)
        print("SQL edition files: " + ", ".join(f"{db}: {i['path']} (sha256 {i['sha256'][:12]})" for db, i in dbs.items()))
        print(f"k instructions per transaction of the server (callgrind, {args.n} transactions after 50):\n")
        results = {}
        for group, hand, edition in pairs:
            todo = ([] if guard else [("hand", hand, False)]) + ([(db, edition, True) for db in dbs] if edition else [])
            for db, sc, is_edition in todo:
                if (db, sc) in results:
                    continue
                n = max(10, args.n // 10) if sc.endswith("_batch") else args.n   # 100 messages each
                preload = db == "native"
                a, _ = count(f"{server.dir}/data", db, sc, 0, is_edition, workdir, preload, keep)
                b, errors = count(f"{server.dir}/data", db, sc, n, is_edition, workdir, preload, keep)
                if errors:
                    raise BenchError(f"{db}/{sc}: {errors[:3]}")
                results[(db, sc)] = (b - a) / n / 1000
        native = {edition: results[("native", edition)] for _, _, edition in pairs if edition and args.native}
        if guard:
            return check_guard(guard, native, major, dbs["native"]["sha256"])
        header = "| group | hand-written | " + " | ".join(dbs) + " |"
        print(header)
        print("|---|---:|" + "---:|" * len(dbs))
        for group, hand, edition in pairs:
            h = results[("hand", hand)]
            cells = [f"{results[(db, edition)]:,.0f} ({results[(db, edition)] / h:.2f}x)" if edition else ""
                     for db in dbs]
            if not edition:   # the PL/pgSQL reference: against the hand-written fresh path
                h_txt = f"{h:,.0f} ({h / results[('hand', 'handrolled')]:.2f}x of handrolled)"
                print(f"| {group} (`{hand}`) | {h_txt} | " + " | ".join(cells) + " |")
                continue
            print(f"| {group} (`{hand}`{' / `' + edition + '`' if edition else ''}) | {h:,.0f} | " + " | ".join(cells) + " |")
        if args.write_guard:
            write_guard(Path(args.write_guard), native, args, major, dbs["native"]["sha256"])
        return 0
    except (BenchError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
