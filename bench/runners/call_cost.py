#!/usr/bin/env python3
"""What pg_idem's calls add to a transaction of five business statements, in microseconds.

    python3 bench/runners/call_cost.py --pg 17 [--rounds 3] [--duration 15] [--clients 1] [--native]
    python3 bench/runners/call_cost.py --smoke     # the test command: 1 round x 1 s

The business transaction is five statements of an order service (lock the account, debit it,
insert the order, a ledger line and an outbox event). Each scenario wraps the same five
statements with one way of making them idempotent, in one transaction, with pgbench -M prepared:

    business          the five statements alone
    request           idem_claim first, idem_complete last (a fresh key every time)
    request_by_hand   the usual hand-written keys table: INSERT ... ON CONFLICT DO NOTHING, UPDATE
    consume           idem_consume first (a new message every time)
    inbox_by_hand     the usual hand-written inbox: INSERT ... ON CONFLICT DO NOTHING

on the SQL edition (installed plainly into a server without pg_idem's library) and, with
--native, on the native edition (a second server that preloads it; its build is reported, as a
debug build's numbers are not a release build's). Rounds alternate the order of the scenarios.
Reported per scenario: the transaction's mean latency (pgbench's per-transaction log), what it adds to `business`
(the difference of the latencies, round trips included), and the server time of the
idempotency statements themselves (pg_stat_statements' mean execution time, per transaction).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import BENCH_DIR, BenchError, Server, log, median, run_pgbench, use_pg  # noqa: E402
from lib.editions import bench_schema, generate_sql_edition, install_sql_edition  # noqa: E402

SHOP = """
CREATE SCHEMA shop;
CREATE TABLE shop.accounts (id integer PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO shop.accounts SELECT i, 1000000000 FROM generate_series(1, 10000) AS i;
CREATE TABLE shop.orders (id bigserial PRIMARY KEY, account integer NOT NULL, amount bigint NOT NULL,
                          created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, account integer NOT NULL,
                          amount bigint NOT NULL);
CREATE TABLE shop.outbox (id bigserial PRIMARY KEY, order_id bigint NOT NULL, payload jsonb NOT NULL);
"""

# the five statements, the same in every scenario
BUSINESS = """\\set a random(1, 10000)
\\set amount random(100, 99999)
SELECT balance FROM shop.accounts WHERE id = :a FOR UPDATE;
UPDATE shop.accounts SET balance = balance - :amount WHERE id = :a;
INSERT INTO shop.orders (account, amount) VALUES (:a, :amount) RETURNING id AS order_id \\gset
INSERT INTO shop.ledger (order_id, account, amount) VALUES (:order_id, :a, 0 - :amount::bigint);
INSERT INTO shop.outbox (order_id, payload)
VALUES (:order_id, jsonb_build_object('account', :a::int, 'amount', :amount::bigint));
"""
HASH = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
KEY = "\\set k random(1, 9223372036854775807)\n"
# before and after the five statements; `1 / ...::int` and `\gset` fail the run on any answer
# but the fresh one, so every transaction ran its business statements
SCENARIOS = {
    "business": ("", ""),
    "request": (
        f"SELECT c.fence, 1 / (c.outcome = 'claimed')::int AS ok FROM idem_claim('t', :k, '{HASH}') AS c \\gset\n",
        "SELECT idem_complete('t', :k, :fence, 201, jsonb_build_object('order_id', :order_id::bigint));\n"),
    "request_by_hand": (
        "INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at)\n"
        f"VALUES ('t', :k, '{HASH}', 'in_progress', now() + interval '24 hours')\n"
        "ON CONFLICT DO NOTHING RETURNING key \\gset\n",
        "UPDATE handrolled_keys SET status = 'completed', response_code = 201,\n"
        "       response_body = jsonb_build_object('order_id', :order_id::bigint)\n"
        " WHERE tenant = 't' AND key = :k RETURNING response_code AS stored \\gset\n"),
    "consume": ("SELECT 1 / idem_consume('sub', :k)::int AS ok \\gset\n", ""),
    "inbox_by_hand": (
        "INSERT INTO processed_messages (subscriber_id, message_id) VALUES ('sub', :k)\n"
        "ON CONFLICT DO NOTHING RETURNING message_id \\gset\n", ""),
}
# the statements of pg_idem or of the hand-written tables, in pg_stat_statements
IDEMPOTENCY = r"idem_(?:claim|complete|consume)|handrolled_keys|processed_messages"


def script(name: str) -> str:
    before, after = SCENARIOS[name]
    return KEY + "BEGIN;\n" + before + BUSINESS + after + "END;\n"


def pgbench(server: Server, workdir: Path, path: Path, clients: int, seconds: int) -> dict:
    r = run_pgbench(server, str(workdir), path, clients, seconds, tag=path.stem)
    if r.errors:
        raise BenchError(f"pgbench {path.name}: " + "; ".join(r.errors))
    return {"latency_us": sum(r.latencies_us) / len(r.latencies_us), "transactions": r.txns}


def idempotency_statements(server: Server, txns: int) -> dict[str, float]:
    """Server time of each idempotency statement per transaction (pg_stat_statements), by the
    call or table it names."""
    rows = server.rows(f"""
SELECT split_part(ltrim(query), ' ', 1) || ' ' || substring(query from '({IDEMPOTENCY})'),
       sum(total_exec_time) FROM pg_stat_statements
 WHERE query ~ '{IDEMPOTENCY}' AND query !~* '^\\s*(CREATE|INSERT INTO shop)'
 GROUP BY 1 ORDER BY 1""")
    return {name: float(ms) * 1000 / max(txns, 1) for name, ms in rows}


def measure(sides: dict[str, Server], a, workdir: Path) -> dict:
    paths = {}
    for name in SCENARIOS:
        paths[name] = workdir / f"{name}.sql"
        paths[name].write_text(script(name))
    runs: dict[str, dict[str, list[dict]]] = {side: {n: [] for n in SCENARIOS} for side in sides}
    for rnd in range(a.rounds):
        order = list(SCENARIOS) if rnd % 2 == 0 else list(SCENARIOS)[::-1]
        for side, server in sides.items():
            for name in order:
                server.execute("TRUNCATE shop.orders, shop.ledger, shop.outbox, handrolled_keys, processed_messages,"
                               " idem.keys; CHECKPOINT; SELECT pg_stat_statements_reset();")
                run = pgbench(server, workdir, paths[name], a.clients, a.duration)
                run["statements_us"] = idempotency_statements(server, run["transactions"])
                run["idempotency_us"] = sum(run["statements_us"].values())
                runs[side][name].append(run)
                log(f"round {rnd + 1} {side:>6} {name:<16} {run['latency_us']:8.1f} µs/txn, "
                    f"idempotency statements {run['idempotency_us']:6.1f} µs/txn ({run['transactions']} txns)")
    return runs


def summary(runs: dict) -> list[dict]:
    rows = []
    for side, by_name in runs.items():
        base = by_name["business"]
        for name, rs in by_name.items():
            added = [r["latency_us"] - b["latency_us"] for r, b in zip(rs, base)]
            rows.append({"side": side, "scenario": name,
                         "latency_us": median([r["latency_us"] for r in rs]),
                         "added_us": median(added) if name != "business" else None,
                         "added_us_rounds": added if name != "business" else [],
                         "idempotency_us": median([r["idempotency_us"] for r in rs]),
                         "statements_us": {k: median([r["statements_us"].get(k, 0.0) for r in rs])
                                           for k in sorted({k for r in rs for k in r["statements_us"]})}})
    return rows


def render(rows: list[dict], a, env: dict) -> str:
    lines = [
        "# What pg_idem's calls add to five business statements",
        "",
        f"`python3 bench/runners/call_cost.py {' '.join(sys.argv[1:])}`: {a.rounds} round(s) x {a.duration} s per run, "
        f"{a.clients} client(s), pgbench -M prepared, fsync and synchronous_commit on. {env['postgres']}.",
        "",
        "| server | scenario | transaction, µs (median) | added to `business`, µs (rounds) | "
        "idempotency statements' server time, µs/txn | of which |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        added = ("" if r["added_us"] is None else
                 f"{r['added_us']:+.0f} (" + ", ".join(f"{x:+.0f}" for x in r["added_us_rounds"]) + ")")
        parts = ", ".join(f"`{k}` {v:.0f}" for k, v in r["statements_us"].items())
        lines.append(f"| {r['side']} | {r['scenario']} | {r['latency_us']:.0f} | {added} | "
                     f"{r['idempotency_us']:.0f} | {parts} |")
    if env.get("native_build"):
        lines += ["", f"Native edition: {env['native_build']}."]
    lines += ["", "Server `sql`: the SQL edition installed plainly, no pg_idem library; `native`: pg_idem "
              "preloaded. The hand-written scenarios run on both, against the tables of bench/scenarios/schema.sql."]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pg")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--native", action="store_true", help="measure the native edition too")
    p.add_argument("--smoke", action="store_true", help="the test command's run: 1 round x 1 s")
    p.add_argument("--out", default=str(BENCH_DIR / "out" / "call-cost"))
    a = p.parse_args()
    if a.smoke:
        a.rounds, a.duration = 1, 1
    if a.pg:
        use_pg(a.pg)
    common = ["shared_buffers = '512MB'", "max_wal_size = '16GB'", "checkpoint_timeout = '30min'"]
    sql = Server(common + ["shared_preload_libraries = 'pg_stat_statements'"])
    native = Server(common + ["shared_preload_libraries = 'pg_idem,pg_stat_statements'",
                              "pg_idem.purge_interval = 0"]) if a.native else None
    workdir = Path(tempfile.mkdtemp(prefix="pg_idem_call_cost."))
    env: dict = {}
    try:
        sql.start()
        install_sql_edition(sql, generate_sql_edition(str(workdir)))
        sql.execute(bench_schema(native=False) + SHOP + "CREATE EXTENSION pg_stat_statements;")
        sides = {"sql": sql}
        env["postgres"] = sql.value("SELECT version()")
        if native:
            native.start()
            native.execute(bench_schema(native=True) + SHOP + "CREATE EXTENSION pg_stat_statements;")
            so = Path(native.value("SELECT setting FROM pg_config() WHERE name = 'PKGLIBDIR'")) / "pg_idem.so"
            env["native_build"] = (f"`{so}`, {so.stat().st_size:,} bytes"
                                   + (" (a debug build: not what a release build gives)"
                                      if so.stat().st_size > 20_000_000 else ""))
            sides["native"] = native
        runs = measure(sides, a, workdir)
    finally:
        sql.stop()
        if native:
            native.stop()
    rows = summary(runs)
    report = render(rows, a, env)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report)
    (out / "results.json").write_text(json.dumps({"args": vars(a), "environment": env, "runs": runs,
                                                  "summary": rows}, indent=1))
    print(report)
    # a smoke run checks that every scenario ran and was measured, not its numbers
    if any(r["latency_us"] <= 0 or (r["scenario"] != "business" and r["idempotency_us"] <= 0) for r in rows):
        log("a scenario was not measured")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
