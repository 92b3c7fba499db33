#!/usr/bin/env python3
"""pg_idem's SQL edition against the hand-written patterns and the native edition (Python 3.11,
standard library only).

    python3 bench/runners/sql_edition.py --smoke                 # < 1 minute: proves the runner works
    python3 bench/runners/sql_edition.py --pg 17                 # full: 3 rounds x 20 s per run
    python3 bench/runners/sql_edition.py --pg 17 --variant opt=/tmp/pg_idem--0.6.0.sql   # + a changed install file

Two throwaway servers (scripts/lib/pg.sh, set up as bench/runners/run.py's; same settings):

- server S, pg_idem NOT preloaded and never CREATE EXTENSIONed: the SQL edition, installed with its
  plain install file (scripts/sql_edition.py; one transaction, as the role that owns it) into
  database `sqled` (each --variant into `sqled_LABEL`), and the hand-written patterns in database
  `hand` (bench/scenarios/schema.sql without its CREATE EXTENSION);
- server N, shared_preload_libraries = 'pg_idem': the native edition, CREATE EXTENSION
  (bench/scenarios/schema.sql) in database `native`.

Groups of scenarios, each at every --clients, each side with its bench/scenarios/ script:

    fresh         handrolled.sql  (+ plpgsql.sql)  | pg_idem.sql (SQL edition, native edition)
    replay        handrolled_replay.sql            | replay.sql
    consume       inbox.sql                        | consume.sql
    consume_many  inbox_batch.sql                  | consume_batch.sql

Rounds alternate (odd rounds forward, even rounds reversed, the sides of one group and client
count next to each other), so both sides share a noisy machine's drift. Every run starts from
truncated tables and a CHECKPOINT on its server (replay: from a pool of completed keys filled
through the real calls). Writes OUT/results.json, OUT/report.md and OUT/tps.svg; OUT/server-*.log.
Exits 1 when a run failed or a sanity check did not hold; targets are reported, not asserted.

    python3 bench/runners/sql_edition.py --render bench/report/sql-edition/results.json   # re-render only
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
from html import escape
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib

from lib import (BATCH, BENCH_DIR, REPO_DIR, SCENARIO_DIR, SERVER_SETTINGS, BenchError, Server, calibrate,  # noqa: E402
                 check_tools, conf_lines, exit_status, fmt, interrupt_on_sigterm,
                 library_replaced, log, run_pgbench, stamp_end, summarize_noise, summarize_rounds, use_pg)
from lib import charts  # noqa: E402
from lib.editions import (GROUPS, Side, bench_schema, file_info, generate_sql_edition,  # noqa: E402
                          install_sql_edition, on_db, remember_postmaster)
from lib.environment import environment  # noqa: E402

GROUP_TITLES = {
    "fresh": "fresh request path: claim + business INSERT + complete, one transaction",
    "replay": "replay: a claim of a completed key, one statement in autocommit",
    "consume": "consume: one message per transaction + business INSERT",
    "consume_many": "consume_many: 100 messages per transaction, one statement with the business INSERT",
}
SIDE_TITLES = {
    "hand": "hand-written",
    "plpgsql": "PL/pgSQL reference (bench/scenarios/schema.sql)",
    "sql": "SQL edition",
    "native": "native edition",
}
# issue 41's targets, the SQL edition's TPS against the hand-written pattern's: the fresh path
# and single consumes at least 0.80x at 1 client and 0.85x at 8, replays 0.75x, batches 0.85x
def target(group: str, clients: int) -> float:
    if group in ("fresh", "consume"):
        return 0.80 if clients == 1 else 0.85
    return 0.75 if group == "replay" else 0.85


def side_title(side: str) -> str:
    if side.startswith("sql:"):
        return f"SQL edition, variant {side[4:]}"
    return SIDE_TITLES.get(side, side)


def side_script(group: str, side: str) -> str:
    sides = GROUPS[group]
    return sides["sql"] if side.startswith("sql:") else sides[side]


def check_run(group: str, side: Side, txns: int, c: dict, pool: int) -> list[str]:
    """The run did what its scenario says (scripts fail a transaction otherwise, too)."""
    n = txns
    problems = []

    def expect(cond, text):
        if not cond:
            problems.append(text)

    if group == "replay":
        if side.has_keys:
            expect(c["payments"] == 0 and c["keys"] == pool and c["keys_done"] == pool,
                   f"replay changed data: payments {c['payments']}, keys {c['keys']}/{pool}, completed {c['keys_done']}")
        else:
            expect(c["payments"] == 0 and c["handrolled"] == pool and c["handrolled_done"] == pool,
                   f"replay changed data: payments {c['payments']}, keys {c['handrolled']}/{pool}")
        return problems
    m = n * (BATCH if group == "consume_many" else 1)
    expect(c["payments"] == m, f"payments {c['payments']} != {m}")
    if side.name == "hand":
        recorded = c["handrolled_done"] if group == "fresh" else c["inbox"]
    elif side.name == "plpgsql":
        recorded = c["plpgsql_done"]
    else:
        recorded = c["keys_done"]
        expect(c["keys"] == m, f"idem.keys has {c['keys']} rows for {m} keys")
    expect(recorded == m, f"{recorded} keys recorded (completed) for {m}")
    return problems


# ------------------------------------------------------------------------------------------------
# The matrix
# ------------------------------------------------------------------------------------------------

def run_matrix(sides: dict[str, Side], args, workdir: str, results: dict) -> list[str]:
    problems: list[str] = []
    runs = []
    for g in args.groups:
        for c in args.clients:
            for s in GROUPS[g]:
                if s == "sql":
                    for name in [n for n in sides if n == "sql" or n.startswith("sql:")]:
                        runs.append((g, c, name))
                elif s in sides:
                    runs.append((g, c, s))
    results["matrix_order"] = [f"{g}@{c}/{s}" for g, c, s in runs]
    data = results.setdefault("runs", {})

    def prepare(group: str, side: Side) -> None:
        if group == "replay":
            if side.replay_pool != args.replay_keys:
                secs = side.fill_replay(args.replay_keys)
                log(f"  {side.name}: replay pool of {args.replay_keys} completed keys in {secs:.1f}s")
        else:
            # no ANALYZE (see run.py's prepare): empty-table statistics would make the generic
            # plans of pgbench's prepared statements and of PL/pgSQL sequential scans
            side.truncate()
        side.db.execute("CHECKPOINT;")

    if args.warmup > 0:
        log(f"warm-up: {args.warmup:g}s per group and side, 2 clients")
        seen = set()
        for g, c, s in runs:
            if (g, s) in seen:
                continue
            seen.add((g, s))
            side = sides[s]
            prepare(g, side)
            r = run_pgbench(side.db, workdir, SCENARIO_DIR / f"{side_script(g, s)}.sql", 2, args.warmup,
                            {"pool": args.replay_keys} if g == "replay" else {}, tag=f"warm-{g}-{s}")
            if r.errors:
                problems.append(f"warm-up {g}/{s}: " + "; ".join(r.errors))
            side.db.wait_for_clients_gone()

    for rnd in range(args.rounds):
        order = runs if rnd % 2 == 0 else list(reversed(runs))
        log(f"round {rnd + 1}/{args.rounds}: {len(order)} runs, {'forward' if rnd % 2 == 0 else 'backward'}")
        for g, c, s in order:
            side = sides[s]
            prepare(g, side)
            cal = calibrate(side.db) if args.calibrate else None
            load1 = os.getloadavg()[0]
            lsn0 = side.lsn()
            script = side_script(g, s)
            r = run_pgbench(side.db, workdir, SCENARIO_DIR / f"{script}.sql", c, args.duration,
                            {"pool": args.replay_keys} if g == "replay" else {}, tag=f"{g}-{c}-{s}-{rnd}")
            side.db.wait_for_clients_gone()
            lsn1 = side.lsn()
            probs = [f"{g}@{c}/{s} round {rnd + 1}: {e}" for e in r.errors]
            if not r.errors:
                probs += [f"{g}@{c}/{s} round {rnd + 1}: {e}"
                          for e in check_run(g, side, r.txns, side.counts(), args.replay_keys)]
            problems += probs
            rec = {"round": rnd + 1, "group": g, "clients": c, "side": s, "script": f"{script}.sql",
                   "tps": r.tps, "txns": r.txns, "failed": r.failed, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                   "wal_bytes_per_txn": (lsn1 - lsn0) / max(1, r.txns),
                   "other_cpu_share": r.cpu.get("other_cpu_share"), "other_top": r.cpu.get("other_top"),
                   "steal_share": r.cpu.get("steal_share"), "our_cpu_share": r.cpu.get("our_cpu_share"),
                   "cpu_cal_ms": cal, "loadavg1_before": load1, "errors": probs,
                   "at": dt.datetime.now().isoformat(timespec="seconds")}
            data.setdefault(f"{g}@{c}/{s}", []).append(rec)
            tps_s = f"{r.tps:9.1f}" if r.tps is not None else "      n/a"
            p99_s = f"{r.p99_ms:.2f}" if r.p99_ms is not None else "n/a"
            noise = rec["other_cpu_share"] or 0
            log(f"  {g:>12} @{c:<2} {s:<10} tps {tps_s}  p99 {p99_s} ms  WAL {rec['wal_bytes_per_txn']:.0f} B/txn  "
                f"other CPU {noise * 100:.0f}%  load {load1:.2f}" + (f"  cal {cal:.0f} ms" if cal else "")
                + (f" ({', '.join(rec['other_top'])})" if noise > 0.05 else "")
                + ("  ERR " + "; ".join(probs) if probs else ""))
    return problems


# ------------------------------------------------------------------------------------------------
# Summary, ratios, report
# ------------------------------------------------------------------------------------------------

def summarize(results: dict) -> dict:
    summ = {}
    for key, recs in results.get("runs", {}).items():
        s = summarize_rounds(recs, ["p50_ms", "p99_ms", "wal_bytes_per_txn"])
        s.update(summarize_noise(recs))
        s["load_max"] = max((r.get("loadavg1_before") or 0 for r in recs), default=0)
        summ[key] = s
    return summ


def ratio_pairs(sides: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) pairs the report gives, in its order."""
    variants = [s for s in sides if s.startswith("sql:")]
    pairs = [("sql", "hand"), ("sql", "native")]
    for v in variants:
        pairs += [(v, "hand"), (v, "native"), (v, "sql")]
    pairs += [("native", "hand"), ("plpgsql", "hand")]
    return [(a, b) for a, b in pairs if a in sides and b in sides]


def ratios(results: dict, summ: dict) -> dict:
    """Ratio of the medians and the same-round ratios, per group@clients and pair."""
    out = {}
    runs = results.get("runs", {})
    for g in GROUPS:
        for c in results["args"]["clients"]:
            present = [k.split("/", 1)[1] for k in runs if k.startswith(f"{g}@{c}/")]
            for a, b in ratio_pairs(present):
                ka, kb = f"{g}@{c}/{a}", f"{g}@{c}/{b}"
                ta, tb = summ[ka]["tps"], summ[kb]["tps"]
                by_round_b = {r["round"]: r["tps"] for r in runs[kb]}
                per_round = [ra["tps"] / by_round_b[ra["round"]]
                             for ra in runs[ka] if ra["tps"] and by_round_b.get(ra["round"])]
                out[f"{g}@{c}/{a}:{b}"] = {"group": g, "clients": c, "num": a, "den": b,
                                             "ratio": ta / tb if ta and tb else None, "per_round": per_round}
    return out


COLORS = {"hand": "#4c78a8", "plpgsql": "#9d755d", "sql": "#f58518", "native": "#54a24b"}
VARIANT_COLORS = ["#e45756", "#b279a2", "#72b7b2", "#bab0ac"]


def side_color(side: str, variants: list[str]) -> str:
    if side in COLORS:
        return COLORS[side]
    return VARIANT_COLORS[variants.index(side) % len(VARIANT_COLORS)] if side in variants else "#888"


def svg_chart(results: dict, summ: dict, title: str) -> str:
    """One chart, one panel per group (each with its own TPS axis), a bar per side and client
    count, whiskers min-max over rounds."""
    args = results["args"]
    clients = args["clients"]
    groups = [g for g in GROUPS if any(k.startswith(g + "@") for k in summ)]
    all_sides = []
    for k in summ:
        s = k.split("/", 1)[1]
        if s not in all_sides:
            all_sides.append(s)
    order = ["hand", "plpgsql", "sql"] + sorted(s for s in all_sides if s.startswith("sql:")) + ["native"]
    all_sides = [s for s in order if s in all_sides]
    variants = [s for s in all_sides if s.startswith("sql:")]
    PW, PH, L, T, GAP = 420, 250, 70, 60, 60
    cols = 2
    rows = (len(groups) + cols - 1) // cols
    W = L + cols * (PW + GAP)
    H = T + rows * (PH + 80) + 40
    o = charts.svg_open(W, H, escape(title), 22, 15)
    # legend
    lx = L
    for s in all_sides:
        o.append(f'<rect x="{lx}" y="34" width="12" height="12" fill="{side_color(s, variants)}"/>')
        o.append(f'<text x="{lx + 16}" y="44">{escape(side_title(s))}</text>')
        lx += 20 + 7 * len(side_title(s))
    for gi, g in enumerate(groups):
        px = L + (gi % cols) * (PW + GAP)
        py = T + 20 + (gi // cols) * (PH + 80)
        vals = [summ[k]["tps_max"] or 0 for k in summ if k.startswith(g + "@")]
        vmax = max(vals + [1])
        top = charts.bar_axis_top(vmax * 1.1 / 5)
        o.append(f'<text x="{px + PW / 2}" y="{py - 8}" text-anchor="middle" font-weight="bold">{escape(g)}</text>')
        for i in range(6):
            v = top * i / 5
            y = py + PH - PH * v / top
            o.append(f'<line x1="{px}" y1="{y:.1f}" x2="{px + PW}" y2="{y:.1f}" stroke="#e3e3e3"/>')
            o.append(f'<text x="{px - 5}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{v:,.0f}</text>')
        o.append(f'<line x1="{px}" y1="{py + PH}" x2="{px + PW}" y2="{py + PH}" stroke="#333"/>')
        o.append(f'<line x1="{px}" y1="{py}" x2="{px}" y2="{py + PH}" stroke="#333"/>')
        cw = PW / max(1, len(clients))
        for ci, c in enumerate(clients):
            present = [s for s in all_sides if f"{g}@{c}/{s}" in summ]
            bw = min(40, (cw - 16) / max(1, len(present)))
            x0 = px + ci * cw + (cw - bw * len(present)) / 2
            for bi, s in enumerate(present):
                st = summ[f"{g}@{c}/{s}"]
                v = st["tps"] or 0
                whisker = st["rounds"] > 1
                charts.bar(o, x0 + bi * bw, bw, py + PH, PH, top, v, st["tps_min"] if whisker else None,
                           st["tps_max"] if whisker else None, side_color(s, variants),
                           f"{escape(g)} @ {c}: {escape(side_title(s))} {v:,.0f} tps", 1, 4, 9)
            o.append(f'<text x="{px + ci * cw + cw / 2:.1f}" y="{py + PH + 16}" text-anchor="middle">'
                     f'{c} client{"s" if c != 1 else ""}</text>')
        o.append(f'<text x="{px - 52}" y="{py + PH / 2}" transform="rotate(-90 {px - 52} {py + PH / 2})" '
                 f'text-anchor="middle" font-size="10">TPS (median of rounds)</text>')
    o.append(f'<text x="{W - 20}" y="{H - 12}" text-anchor="end" fill="#555" font-size="11">'
             f'whiskers: min-max over rounds; consume_many: transactions of 100 messages</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def write_report(out: Path, results: dict) -> None:
    args = SimpleNamespace(**results["args"])
    summ = results["summary"]
    rat = results["ratios"]
    env = results.get("environment", {})
    sqlenv = results.get("sql_edition", {})
    problems = results.get("problems", [])
    lines: list[str] = []
    L = lines.append
    L("# pg_idem SQL edition: benchmark report")
    L("")
    L(f"Generated {results.get('finished_at')} by `{results['command']}` "
      f"({'SMOKE mode: the numbers mean little' if args.smoke else 'full mode'}; {args.rounds} round(s) x "
      f"{args.duration:g} s per run; total {results.get('elapsed_s', 0) / 60:.1f} min).")
    L("")
    if problems:
        L("**Problems** (the run exits non-zero):")
        L("")
        for p in problems:
            L(f"- {p}")
        L("")
    L("## Environment")
    L("")
    L(f"- CPU: {env.get('cpus')} x {env.get('cpu_model')}, memory {env.get('memory_gib')} GiB, kernel {env.get('kernel')}")
    L(f"- {env.get('postgres')}; {env.get('pgbench')}")
    so = env.get("pg_idem_so", {})
    if results.get("args", {}).get("no_native"):
        L("- native edition: not measured (`--no-native`)")
    else:
        L(f"- native edition: pg_idem {env.get('pg_idem_version')}, `{so.get('path')}`, {fmt(so.get('bytes'), 0)} bytes, "
          f"built {so.get('mtime')}, build profile: **{so.get('profile_guess')}**"
          + (" — a debug build: the native edition's numbers (and the SQL/native ratios) are not what a "
             "release build gives" if so.get("debug_info") and (so.get("bytes") or 0) > 20_000_000 else ""))
    for label, info in sqlenv.get("files", {}).items():
        L(f"- SQL edition{'' if label == 'sql' else ' variant ' + label[4:]}: `{info.get('path')}` "
          f"({fmt(info.get('bytes'), 0)} bytes, sha256 {info.get('sha256', '')[:12]}), installed with `psql -1 -f` into "
          f"database `{info.get('database')}` of a server without pg_idem preloaded; owner settings (rows of "
          f"idem.settings): " + (", ".join(f"`{k} = {v}`" for k, v in info.get("settings", {}).items())
                                 or "none, every setting at its default (purge in passing on)"))
    L("- Hand-written patterns: database `hand` of the same server as the SQL edition "
      "(bench/scenarios/schema.sql without its CREATE EXTENSION).")
    L("- Server settings (both servers; the native one also preloads pg_idem): "
      + ", ".join(f"`{k} = {v}`" for k, v in sorted(sqlenv.get("server_settings", {}).items())))
    la = results.get("loadavg", {})
    L(f"- Machine load (1/5/15-minute load average): at the start {la.get('start')}, at the end {la.get('end')}; "
      f"other CPU (processes other than postgres and pgbench) per run: "
      f"{fmt(min((r.get('other_cpu_share') or 0 for rs in results.get('runs', {}).values() for r in rs), default=0) * 100, 0)}%"
      f"-{fmt(max((r.get('other_cpu_share') or 0 for rs in results.get('runs', {}).values() for r in rs), default=0) * 100, 0)}%")
    L("- pgbench `-M prepared`, `-j` = min(clients, 2), fsync and synchronous_commit on; every run starts from "
      "truncated tables and a CHECKPOINT (replay: from a pool of "
      f"{args.replay_keys:,} completed keys filled through the real calls). Rounds alternate: odd rounds forward, "
      "even rounds reversed; the sides of one group and client count run next to each other.")
    L("")
    L("## Ratios")
    L("")
    L("TPS ratio of the medians of the rounds; in brackets the ratio within each round (the two runs "
      "minutes apart at most).")
    L("")
    pairs = []
    for v in rat.values():
        p = (v["num"], v["den"])
        if p not in pairs:
            pairs.append(p)
    L("| group | clients | " + " | ".join(f"{side_title(a)} / {side_title(b)}" for a, b in pairs) + " |")
    L("|---|---:|" + "---:|" * len(pairs))
    for g in GROUPS:
        for c in args.clients:
            cells = []
            for a, b in pairs:
                v = rat.get(f"{g}@{c}/{a}:{b}")
                if not v:
                    cells.append("")
                    continue
                pr = ", ".join(f"{x:.2f}" for x in v["per_round"])
                cells.append(f"**{v['ratio']:.2f}x** ({pr})" if v["ratio"] is not None else "n/a")
            if any(cells):
                L(f"| {g} | {c} | " + " | ".join(cells) + " |")
    L("")
    L("Targets (issue 41): the fresh path and single consumes at least 0.80x at 1 client and 0.85x "
      "at 8, replays 0.75x, batches 0.85x.")
    L("")
    L("| group | clients | SQL edition / hand-written | target | verdict |")
    L("|---|---:|---:|---:|---|")
    for g in GROUPS:
        for c in args.clients:
            for name in ["sql"] + sorted({v["num"] for v in rat.values() if v["num"].startswith("sql:")}):
                v = rat.get(f"{g}@{c}/{name}:hand")
                if not v or v["ratio"] is None:
                    continue
                r, t = v["ratio"], target(g, c)
                verdict = "**met**" if r >= t else f"**missed** (needs {t / r:.2f}x more)"
                L(f"| {g}{'' if name == 'sql' else ' (' + name + ')'} | {c} | {r:.2f}x | ≥ {t:.2f}x | {verdict} |")
    L("")
    L("## Throughput and latency")
    L("")
    L("![TPS per group, side and client count](tps.svg)")
    L("")
    L("| group | clients | side | script | TPS (median) | TPS min-max | p50 ms | p99 ms | WAL B/txn | other CPU (max) | load (max) | CPU cal. ms |")
    L("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key, s in summ.items():
        g, rest = key.split("@", 1)
        c, side = rest.split("/", 1)
        script = side_script(g, side)
        L(f"| {g} | {c} | {side_title(side)} | `{script}.sql` | {fmt(s['tps'])} | {fmt(s['tps_min'], 0)}-{fmt(s['tps_max'], 0)} | "
          f"{fmt(s['p50_ms'], 3)} | {fmt(s['p99_ms'], 3)} | {fmt(s['wal_bytes_per_txn'], 0)} | "
          f"{fmt(s['other_cpu_max'] * 100, 0)}% | {fmt(float(s['load_max']), 2)} | {fmt(s['cal_ms'], 0)} |")
    L("")
    L("TPS counts transactions (consume_many: 100 messages each). p50/p99 from pgbench's per-transaction log, "
      "median over rounds. CPU cal.: milliseconds of a fixed CPU-bound query on the side's server just before "
      "the run (the machine's speed); load: 1-minute load average just before the run.")
    L("")
    L("## Groups and scripts")
    L("")
    for g, sides in GROUPS.items():
        if g not in args.groups:
            continue
        L(f"- **{g}**: {GROUP_TITLES[g]}. " + "; ".join(
            f"{side_title(s)}: `bench/scenarios/{sc}.sql`" for s, sc in sides.items()))
    L("")
    L("Per-run numbers (every round, noise indicators, `other_top`): `results.json`. Where the SQL edition's "
      "time goes: `bench/diagnostics/sql_edition_profile.py` and `docs/benchmarks.md`, section *SQL edition*.")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def render(out: Path, results: dict) -> None:
    results["summary"] = summarize(results)
    results["ratios"] = ratios(results, results["summary"])
    args = results["args"]
    (out / "tps.svg").write_text(svg_chart(
        results, results["summary"],
        f"pg_idem SQL edition vs hand-written vs native: TPS, {args['rounds']} round(s) x {args['duration']:g} s"
        + (" (SMOKE)" if args["smoke"] else "")))
    write_report(out, results)


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="pg_idem SQL edition benchmark (see bench/README.md, sql_edition.py)")
    p.add_argument("--smoke", action="store_true", help="< 1 minute: 1 round x 1 s per run, a small replay pool")
    p.add_argument("--out", default=str(BENCH_DIR / "out" / "sql-edition"))
    p.add_argument("--rounds", type=int, help="rounds (full: 3)")
    p.add_argument("--duration", type=float, help="seconds per pgbench run (full: 20)")
    p.add_argument("--clients", default="1,8")
    p.add_argument("--groups", default=",".join(GROUPS), help="subset of " + ",".join(GROUPS))
    p.add_argument("--replay-keys", type=int, help="completed keys in each replay pool (full: 20000)")
    p.add_argument("--warmup", type=float, help="seconds of unrecorded warm-up per group and side (full: 3)")
    p.add_argument("--pg", help="PostgreSQL major version (default: pg_config on PATH, as run.py)")
    p.add_argument("--sql-file", help="the SQL edition's plain install file to measure (default: generate it "
                   "with scripts/sql_edition.py)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL=FILE",
                   help="another plain install file measured as side sql:LABEL, in database sqled_LABEL "
                   "of the same server (repeatable): a changed SQL edition against the current one, in one run")
    p.add_argument("--no-native", action="store_true", help="leave the native edition out")
    p.add_argument("--no-plpgsql", action="store_true", help="leave the straightforward PL/pgSQL reference out")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="extra postgresql.conf line for both servers (repeatable)")
    p.add_argument("--render", metavar="RESULTS_JSON", help="re-render report.md and tps.svg from a results.json")
    a = p.parse_args(argv)
    full = dict(rounds=3, duration=20, replay_keys=20_000, warmup=3)
    smoke = dict(rounds=1, duration=1, replay_keys=500, warmup=0)
    for k, v in (smoke if a.smoke else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.clients = [int(x) for x in a.clients.split(",") if x.strip()]
    a.groups = [g.strip() for g in a.groups.split(",") if g.strip()]
    unknown = set(a.groups) - set(GROUPS)
    if unknown:
        p.error(f"unknown groups: {', '.join(sorted(unknown))}")
    variants = []
    for v in a.variant:
        label, eq, path = v.partition("=")
        if not eq or not label.isidentifier() or not Path(path).is_file():
            p.error(f"--variant wants LABEL=FILE with an existing file, got {v!r}")
        variants.append((label, str(Path(path).resolve())))
    a.variant = variants
    a.calibrate = not a.smoke
    return a


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    if args.render:
        path = Path(args.render)
        results = json.loads(path.read_text())
        render(path.parent, results)
        print(f"rendered {path.parent / 'report.md'} and {path.parent / 'tps.svg'}")
        return 0
    if args.pg:
        use_pg(args.pg)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        check_tools()
        common = (["shared_buffers = '256MB'" if args.smoke else "shared_buffers = '2GB'"] + SERVER_SETTINGS
                  + conf_lines(args.set))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    native_settings = ["shared_preload_libraries = 'pg_idem'", "pg_idem.purge_interval = 0"] + common

    interrupt_on_sigterm()
    started = time.time()
    results: dict = {
        "command": "python3 " + " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO_DIR)] + argv),
        "mode": "smoke" if args.smoke else "full",
        "started_at": dt.datetime.now().isoformat(timespec="seconds"),
        "loadavg": {"start": [round(x, 2) for x in os.getloadavg()]},
    }
    results["args"] = {k: v for k, v in vars(args).items()}
    problems: list[str] = []
    workdir = tempfile.mkdtemp(prefix="pg_idem_sqled.")
    os.chmod(workdir, 0o755)
    srv_s = Server(common)
    srv_n = None if args.no_native else Server(native_settings)
    try:
        sql_file = Path(args.sql_file).resolve() if args.sql_file else generate_sql_edition(workdir)
        files = [("sql", sql_file)] + [(f"sql:{label}", Path(path)) for label, path in args.variant]
        log(f"server S (no pg_idem preloaded) in {srv_s.dir}")
        srv_s.start()
        remember_postmaster(srv_s)
        sides: dict[str, Side] = {}
        srv_s.execute("CREATE DATABASE hand;")
        hand = on_db(srv_s, "hand")
        hand.execute(bench_schema(native=False))
        sides["hand"] = Side("hand", hand, "S", has_keys=False)
        if not args.no_plpgsql:
            sides["plpgsql"] = Side("plpgsql", hand, "S", has_keys=False)
        sqlenv = results.setdefault("sql_edition", {"files": {}})
        for name, path in files:
            dbname = "sqled" if name == "sql" else f"sqled_{name[4:].lower()}"
            srv_s.execute(f"CREATE DATABASE {dbname};")
            db = on_db(srv_s, dbname)
            t0 = time.time()
            install_sql_edition(db, path)
            log(f"  {name}: {path.name} installed into {dbname} in {time.time() - t0:.1f}s")
            db.execute(bench_schema(native=False))
            info = file_info(path)
            info["database"] = dbname
            info["settings"] = dict(db.rows("SELECT name, value FROM idem.settings ORDER BY name"))
            sqlenv["files"][name] = info
            sides[name] = Side(name, db, "S", has_keys=True)
        names = ["shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size",
                 "checkpoint_timeout", "full_page_writes", "jit", "shared_preload_libraries", "lc_collate"]
        sqlenv["server_settings"] = dict(srv_s.rows(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name IN ("
            + ",".join(f"'{n}'" for n in names) + ") ORDER BY name"))
        if srv_n is not None:
            log(f"server N (pg_idem preloaded) in {srv_n.dir}")
            srv_n.start()
            remember_postmaster(srv_n)
            srv_n.execute("CREATE DATABASE native;")
            nat = on_db(srv_n, "native")
            nat.execute(bench_schema(native=True))
            sides["native"] = Side("native", nat, "N", has_keys=True)
            results["environment"] = environment(nat)
            so = results["environment"].get("pg_idem_so", {})
            log(f"native pg_idem.so: {so.get('bytes')} bytes, {so.get('profile_guess')}")
        else:
            # the machine and the server, without the native library's facts
            results["environment"] = environment(hand)
        problems += run_matrix(sides, args, workdir, results)
    except KeyboardInterrupt:
        problems.append("interrupted")
        log("interrupted")
    except (BenchError, subprocess.TimeoutExpired) as e:
        problems.append(f"runner error: {e}")
        log(f"error: {e}")
    finally:
        replaced = library_replaced(results)
        if replaced:
            problems.append(f"{replaced} was replaced while the benchmark ran; rerun")
        log("stopping the servers")
        for srv, tag in ((srv_s, "S"), (srv_n, "N")):
            if srv is None:
                continue
            try:
                shutil.copy(os.path.join(srv.dir, "server.log"), out / f"server-{tag}.log")
            except OSError:
                pass
            srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    stamp_end(results, started, problems)
    results["loadavg"]["end"] = [round(x, 2) for x in os.getloadavg()]
    render(out, results)
    for key in results.get("matrix_order", []):
        s = results["summary"].get(key)
        if not s or s["tps"] is None or s["p99_ms"] is None:
            problems.append(f"{key}: no result")
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    if problems:
        write_report(out, results)
    log(f"done in {results['elapsed_s']:.0f}s; report: {out / 'report.md'}")
    print()
    for key, s in results["summary"].items():
        print(f"  {key:<28} tps {fmt(s['tps']):>10}  p99 {fmt(s['p99_ms'], 3):>8} ms")
    print()
    for key, v in results["ratios"].items():
        if v["ratio"] is not None:
            print(f"  {key:<32} {v['ratio']:.2f}x  ({', '.join(f'{x:.2f}' for x in v['per_round'])})")
    return exit_status(problems)


if __name__ == "__main__":
    sys.exit(main())
