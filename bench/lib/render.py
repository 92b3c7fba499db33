"""Renders a benchmark run from its results.json: report.md and tps.svg, next to it.

run.py measures and writes results.json, then calls render(); `run.py --render results.json`
re-renders a report (after a change of wording or layout) without measuring again.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from types import SimpleNamespace

from lib import charts, fmt, summarize_noise, summarize_rounds
from lib.scenario_list import DESCRIPTIONS, SCENARIOS


def summarize(results: dict) -> dict:
    summ = {}
    for key, recs in results.get("runs", {}).items():
        s = summarize_rounds(recs, ["p50_ms", "p99_ms", "wal_bytes_per_txn", "wal_fpi_per_txn",
                                    "keys_bytes_per_key"])
        s["txns"] = sum(r["txns"] for r in recs)
        s.update(summarize_noise(recs))
        iu = sum(r["idem_upd"] for r in recs)
        ih = sum(r["idem_hot"] for r in recs)
        hu = sum(r["hr_upd"] for r in recs)
        hh = sum(r["hr_hot"] for r in recs)
        s["idem_hot_share"] = ih / iu if iu else None
        s["hr_hot_share"] = hh / hu if hu else None
        s["idem_updates"], s["hr_updates"] = iu, hu
        outs = [r["outcomes"] for r in recs if "outcomes" in r]
        if outs:
            s["outcomes"] = {k: sum(o[k] for o in outs) for k in outs[0]}
        summ[key] = s
    return summ


def svg_chart(summ: dict, scenarios: list[str], clients: list[int], contended_clients: int,
              title: str) -> str:
    groups = [s for s in scenarios if any(k.startswith(s + "@") for k in summ)]
    counts = sorted(set(clients) | ({contended_clients} if "contended" in groups else set()))
    colors = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756"]
    vals = [summ[k]["tps"] or 0 for k in summ]
    vmax = max(vals) if vals else 1
    top = charts.bar_axis_top(max(1.0, vmax * 1.1) / 5)
    W, H, L, R, T, B = 900, 440, 70, 20, 50, 70
    pw, ph = W - L - R, H - T - B
    gw = pw / max(1, len(groups))
    bars_per_group = len(counts)
    bw = min(42, (gw - 20) / max(1, bars_per_group))
    o = charts.svg_open(W, H, title, 24, 16)
    for i in range(6):
        v = top * i / 5
        y = T + ph - ph * v / top
        o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    o.append(f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" '
             f'text-anchor="middle">transactions per second (median of rounds)</text>')
    for gi, g in enumerate(groups):
        present = [c for c in counts if f"{g}@{c}" in summ]
        x0 = L + gi * gw + (gw - bw * len(present)) / 2
        for bi, c in enumerate(present):
            s = summ[f"{g}@{c}"]
            v = s["tps"] or 0
            whisker = s["rounds"] > 1
            charts.bar(o, x0 + bi * bw, bw, T + ph, ph, top, v, s["tps_min"] if whisker else None,
                       s["tps_max"] if whisker else None, colors[counts.index(c) % len(colors)],
                       f"{g} @ {c} clients: {v:,.0f} tps", 2, 5, 10)
        o.append(f'<text x="{L + gi * gw + gw / 2:.1f}" y="{T + ph + 18}" text-anchor="middle" '
                 f'font-weight="bold">{g}</text>')
    o.append(f'<line x1="{L}" y1="{T + ph}" x2="{W - R}" y2="{T + ph}" stroke="#333"/>')
    lx = L
    for c in counts:
        col = colors[counts.index(c) % len(colors)]
        o.append(f'<rect x="{lx}" y="{H - 28}" width="14" height="14" fill="{col}"/>')
        o.append(f'<text x="{lx + 20}" y="{H - 17}">{c} client{"s" if c != 1 else ""}</text>')
        lx += 110
    o.append(f'<text x="{W - R}" y="{H - 17}" text-anchor="end" fill="#555">whiskers: min-max over rounds</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def target_line(name: str, value, target, higher_is_better=True, unit="x", fmt_v=None):
    """One row of the targets table: met/missed and the gap."""
    fv = fmt_v or (lambda v: f"{v:.2f}{unit}")
    if value is None or target is None:
        return f"| {name} | n/a | {fv(target) if target is not None else 'n/a'} | not measured |"
    met = value >= target if higher_is_better else value <= target
    if met:
        verdict = "**met**"
    else:
        if higher_is_better:
            gap = (target - value) / target * 100
            verdict = f"**missed** by {gap:.1f}% (needs {target / value:.2f}x more)" if value > 0 else "**missed**"
        else:
            gap = (value - target) / target * 100
            verdict = f"**missed** by {gap:.1f}% over"
    return f"| {name} | {fv(value)} | {'≥' if higher_is_better else '≤'} {fv(target)} | {verdict} |"


def write_report(out: Path, args, results: dict, summ: dict, problems: list[str]) -> None:
    env = results.get("environment", {})
    clients = args.clients
    lines = []
    L = lines.append
    L("# pg_idem benchmark report")
    L("")
    L(f"Generated {results['finished_at']} by `{results['command']}` "
      f"({'SMOKE mode: numbers are not meaningful' if args.smoke else 'full mode'}; "
      f"{args.rounds} round(s) x {args.duration:g}s per run, {args.keys:,} keys for sizes/purge; "
      f"total {results.get('elapsed_s', 0) / 60:.1f} min).")
    L("")
    if problems:
        L("**Errors / failed checks:**")
        L("")
        for p in problems:
            L(f"- {p}")
        L("")
    so = env.get("pg_idem_so", {})
    L("## Environment")
    L("")
    L(f"- CPU: {env.get('cpus')} x {env.get('cpu_model')}, memory {env.get('memory_gib')} GiB, kernel {env.get('kernel')}")
    L(f"- {env.get('postgres')}; {env.get('pgbench')}")
    L(f"- pg_idem {env.get('pg_idem_version')}: `{so.get('path')}`, {fmt(so.get('bytes'), 0)} bytes, "
      f"built {so.get('mtime')}, build profile: **{so.get('profile_guess')}**")
    L("- Server settings: " + ", ".join(f"`{k} = {v}`" for k, v in env.get("settings", {}).items()))
    settings = env.get("settings", {})
    if settings.get("fsync", "on") == "on" and settings.get("synchronous_commit", "on") == "on":
        L("- fsync and synchronous_commit are on (the defaults): every commit waits for a WAL flush. "
          "Server and pgbench share the same CPUs, connections go over TCP to 127.0.0.1.")
    else:
        L(f"- **fsync = {settings.get('fsync')}, synchronous_commit = {settings.get('synchronous_commit')}**: "
          "commits do not wait for a WAL flush, so this run compares CPU work, not durable commits. "
          "Server and pgbench share the same CPUs, connections go over TCP to 127.0.0.1.")
    L("- pgbench `-M prepared`, `-j` = min(clients, 2); keys (message ids) come from the client as random 63-bit "
      "numbers, tenants `t1`..`t100` (consumer scenarios: subscribers `sub-1`..`sub-10`; the batches' 100 ids are "
      "`seed-1`..`seed-100` from a random seed); "
      "tables are truncated and a CHECKPOINT taken before every run, so every run starts from empty "
      "tables (WAL per transaction then holds almost no full-page images: the pages are new). The purge worker is paused "
      "(`pg_idem.purge_interval = 0`) except during the purge measurement.")
    L("- Runs per round in ABBA order (odd rounds forward, even rounds reversed): "
      + ", ".join(results.get("matrix_order", [])))
    L("")
    L("## Throughput and latency")
    L("")
    L("![TPS per scenario and client count](tps.svg)")
    L("")
    noisy = {k: s for k, s in summ.items() if s.get("other_cpu_max", 0) > 0.05 or s.get("steal_max", 0) > 0.05}
    if noisy:
        L(f"**Noisy machine:** other processes (or the hypervisor, as steal time) took more than 5% of the CPUs during "
          f"{len(noisy)} of {len(summ)} scenario/client combinations (column \"other CPU\", the "
          f"worst round; see `other_top` in results.json). Numbers from those runs are not comparable; "
          f"rerun on an idle machine.")
        L("")
    L("| scenario | clients | TPS (median) | TPS min-max | p50 ms | p99 ms | WAL B/txn | FPI/txn | HOT share of updates | keys table B/key | other CPU | steal | CPU cal. ms |")
    L("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sc in SCENARIOS:
        for key in sorted([k for k in summ if k.startswith(sc + "@")], key=lambda k: int(k.split("@")[1])):
            s = summ[key]
            c = key.split("@")[1]
            hot = s["hr_hot_share"] if sc == "handrolled" else s["idem_hot_share"]
            hot_s = f"{hot * 100:.1f}%" if hot is not None else "-"
            L(f"| {sc} | {c} | {fmt(s['tps'])} | {fmt(s['tps_min'], 0)}-{fmt(s['tps_max'], 0)} | "
              f"{fmt(s['p50_ms'], 3)} | {fmt(s['p99_ms'], 3)} | {fmt(s['wal_bytes_per_txn'], 0)} | "
              f"{fmt(s['wal_fpi_per_txn'], 2)} | {hot_s} | {fmt(s['keys_bytes_per_key'], 0)} | "
              f"{s.get('other_cpu_max', 0) * 100:.0f}% | {s.get('steal_max', 0) * 100:.0f}% | "
              f"{fmt(s.get('cal_ms'), 0)} |")
    L("")
    L("HOT share: `n_tup_hot_upd / n_tup_upd` from `pg_stat_user_tables` over all rounds, for "
      "`idem.keys` (pg_idem scenarios: the updates are the `idem_complete` calls) and for "
      "`handrolled_keys` (handrolled: the response UPDATE). Keys table B/key: table plus index bytes "
      "of the keys table right after the run divided by its keys (no VACUUM; a few thousand to a few "
      "hundred thousand keys), a cross-check of the storage section below. Other CPU: CPU time of "
      "processes other than postgres and pgbench during the run, as a share of all CPUs (worst round); "
      "above a few percent the run was disturbed. Steal: CPU time the hypervisor gave to other guests "
      "(`/proc/stat`), same scale. CPU cal.: milliseconds of a fixed CPU-bound query "
      "(`count(*)` over `generate_series(1, 1000000)`, best of 3) just before the run (median of rounds); "
      "when it moves, the machine's speed moved with it.")
    cals = [r.get("cpu_cal_ms") for recs in results.get("runs", {}).values() for r in recs if r.get("cpu_cal_ms")]
    if cals:
        L("")
        L(f"Machine speed over the matrix: calibration query {min(cals):.0f}-{max(cals):.0f} ms "
          f"(median {statistics.median(cals):.0f} ms, spread {(max(cals) / min(cals) - 1) * 100:.0f}%). "
          + ("**More than 15%: this machine's speed drifted during the run; trust the ratios of the "
             "same round more than absolute numbers, and use more rounds.**" if max(cals) > 1.15 * min(cals) else ""))
    L("")
    L("Checks done after every run (a failure makes the runner exit non-zero): pgbench exit status and "
      "failed transactions; `bare`: one payment per transaction; `handrolled`: one key, one payment and "
      "one UPDATE per transaction, every key completed (the UPDATE's `RETURNING ... \\gset` also fails the "
      "run if it matches nothing); `pg_idem`/`lease`: every claim answered `claimed` (enforced in the "
      "script), one key, one payment and one `idem.keys` update per transaction, every key completed; "
      "`replay`: every claim answered `completed` (enforced in the script), no payment, no update, "
      "pool unchanged; `contended`: outcome tally = transactions, payments = keys = completed keys = "
      "`claimed` outcomes = `idem.keys` updates, no key left in progress, no mismatch; "
      "`inbox`/`consume` (1 message) and `inbox_batch`/`consume_batch` (100 messages per transaction): "
      "every message new (enforced in the script: `RETURNING ... \\gset`, `1 / new::int`, "
      "`1 / (count(*) = 100)::int` over the business rows written), one business row and one recorded "
      "message (`processed_messages` or `idem.keys`, completed) per message, no `idem.keys` update.")
    L("")
    L("The `_batch` scenarios' TPS counts transactions of 100 messages (messages/s = 100 x TPS), and their "
      "WAL and latency are per transaction of 100 messages.")
    L("")
    if "contended@" + str(args.contended_clients) in summ and summ["contended@" + str(args.contended_clients)].get("outcomes"):
        o = summ["contended@" + str(args.contended_clients)]["outcomes"]
        tot = sum(o.values()) or 1
        L("Contended outcomes (all rounds): " + ", ".join(f"{k} {v:,} ({v / tot * 100:.1f}%)" for k, v in o.items())
          + ". TPS counts every request, including the duplicates that only claim.")
        L("")
    # ratios
    L("### Ratios (medians)")
    L("")
    L("| clients | pg_idem / handrolled | pg_idem / plpgsql | pg_idem / bare | handrolled / bare | replay / pg_idem | lease / pg_idem | consume / inbox | consume_batch / inbox_batch |")
    L("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def ratio(a, b, c):
        sa, sb = summ.get(f"{a}@{c}"), summ.get(f"{b}@{c}")
        if not sa or not sb or not sa["tps"] or not sb["tps"]:
            return None
        return sa["tps"] / sb["tps"]

    for c in clients:
        cells = [ratio("pg_idem", "handrolled", c), ratio("pg_idem", "plpgsql", c), ratio("pg_idem", "bare", c), ratio("handrolled", "bare", c),
                 ratio("replay", "pg_idem", c), ratio("lease", "pg_idem", c),
                 ratio("consume", "inbox", c), ratio("consume_batch", "inbox_batch", c)]
        L(f"| {c} | " + " | ".join(fmt(x, 2, "x") for x in cells) + " |")
    L("")
    runs = results.get("runs", {})
    for num, den in (("pg_idem", "handrolled"), ("consume", "inbox"), ("consume_batch", "inbox_batch")):
        per_round = []
        for c in clients:
            a, b = runs.get(f"{num}@{c}", []), runs.get(f"{den}@{c}", [])
            vals = [x["tps"] / y["tps"] for x, y in zip(a, b) if x["tps"] and y["tps"]]
            if len(vals) > 1:
                per_round.append(f"{c} client(s): " + ", ".join(f"{v:.2f}x" for v in vals))
        if per_round:
            L(f"{num} / {den} per round (same round, minutes apart): " + "; ".join(per_round) + ".")
            L("")
    # storage
    st = results.get("storage", {})
    pu = results.get("purge", {})
    ip, wk, hd = pu.get("idem_purge", {}), pu.get("worker", {}), pu.get("handrolled_delete", {})
    if not st and not pu:
        L("_Sizes and purge not measured in this run (`--skip-storage`)._")
        L("")
    else:
        storage_and_purge(L, args, env, st, pu, ip, wk, hd)
    targets(L, args, clients, summ, ratio, st, pu, ip, wk, hd)
    scenarios_and_end(L, args, clients, out, lines)


def storage_and_purge(L, args, env, st, pu, ip, wk, hd):
    L(f"## Storage per key ({args.keys:,} completed keys, after VACUUM)")
    L("")
    L("| table | response body | rows | avg row B | table bytes | index bytes | bytes/key (table) | bytes/key (indexes) | bytes/key total |")
    L("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key, label, body in [("pg_idem_nobody", "idem.keys", "none"), ("handrolled_nobody", "handrolled_keys", "none"),
                             ("pg_idem_body", "idem.keys", "small (~90 B json)"),
                             ("handrolled_body", "handrolled_keys", "small (~90 B json)")]:
        s = st.get(key)
        if s:
            L(f"| {label} | {body} | {fmt(s['rows'])} | {fmt(s.get('avg_row_bytes'), 0)} | {fmt(s['table_bytes'])} | {fmt(s['index_bytes'])} | "
              f"{fmt(s['table_per_key'], 1)} | {fmt(s['index_per_key'], 1)} | {fmt(s['per_key'], 1)} |")
    L("")
    L("Both tables are filled through their real lifecycle, one key at a time (pg_idem: idem_claim then "
      "idem_complete; hand-rolled: INSERT ... ON CONFLICT DO NOTHING then the response UPDATE), "
      "one key per transaction as an application does it (fill sessions use synchronous_commit = off, "
      "which changes nothing on disk). Avg row is `avg(pg_column_size(row))`, the tuple without "
      "page overhead. "
      f"Fill rate: pg_idem {fmt(st.get('fill_rate_pg_idem'), 0)} keys/s, "
      f"hand-rolled {fmt(st.get('fill_rate_handrolled'), 0)} keys/s ({st.get('fill_workers', 2)} sessions).")
    L("")
    # purge
    L("## Purge")
    L("")
    L("| path | keys | time | keys/s | WAL B/key |")
    L("|---|---:|---:|---:|---:|")
    if ip:
        L(f"| `SELECT idem_purge()` (one call, one transaction, no load) | {fmt(ip['keys'])} | {ip['seconds']:.2f} s | "
          f"{fmt(ip['keys_per_s'], 0)} | {fmt(ip.get('wal_bytes_per_key'), 0)} |")
    if wk:
        L(f"| purge worker, one pass, batches of {wk.get('batch_size')} (under the claim load below) | "
          f"{fmt(wk['keys'])} | {wk['ms'] / 1000:.2f} s | {fmt(wk['keys_per_s'], 0)} | ~{fmt(wk.get('wal_bytes_per_key'), 0)} |")
    if hd:
        L(f"| reference: `DELETE FROM handrolled_keys WHERE expires_at < now()` (one transaction, under the same claim load) | {fmt(hd['keys'])} | {hd['seconds']:.2f} s | {fmt(hd['keys_per_s'], 0)} | |")
    L("")
    L("Each purge starts right after a CHECKPOINT, so its WAL includes a full-page image of every page "
      "it touches first (as a purge of old keys usually does in production). The worker's WAL is the "
      "WAL of the whole window less the claim load's (baseline WAL per transaction x transactions).")
    L("")
    ld = pu.get("load", {})
    if ld:
        L(f"Claim latency: `{ld['script']}` (claim + insert + complete) at a fixed {ld['rate_tps']} tps "
          f"({args.latency_load:.0%} of pg_idem@1 TPS) with {ld['clients']} clients; latency counted from the scheduled start. "
          f"The load during the pass is {pu.get('load_runs', 0)} pgbench run(s): one sized to outlast the pass, more only "
          f"if it did not (a new pgbench's connection start-up counts in its first transactions' latency).")
        L("")
        L("| | p50 ms | p99 ms | transactions |")
        L("|---|---:|---:|---:|")
        L(f"| baseline, no purge | {fmt(pu.get('baseline_p50_ms'), 3)} | {fmt(pu.get('baseline_p99_ms'), 3)} | |")
        L(f"| during the worker's pass ({fmt(pu.get('window_s'), 2)} s) | {fmt(pu.get('during_p50_ms'), 3)} | "
          f"{fmt(pu.get('during_p99_ms'), 3)} | {pu.get('during_txns', 0)} |")
        L(f"| same load run, outside the pass | | {fmt(pu.get('outside_p99_ms'), 3)} | |")
        if hd:
            L(f"| reference: during the hand-rolled DELETE ({hd['seconds']:.2f} s) | | "
              f"{fmt(hd.get('during_p99_ms'), 3)} | {hd.get('during_txns', 0)} |")
        L("")
        L(f"With {env.get('cpus')} CPUs, a backend that keeps one CPU busy (the purge worker, or any long "
          f"query) takes {'half' if env.get('cpus') == 2 else 'a large share'} of the machine from the "
          f"load and from pgbench; the reference row shows what a plain DELETE of as many rows does to "
          f"the same load, which separates pg_idem's own effect from CPU contention.")
        L("")
        L(f"Noise: calibration query {fmt(pu.get('baseline_cal_ms'), 0)} ms before the baseline and "
          f"{fmt(pu.get('during_cal_ms'), 0)} ms before the purge run; steal {((pu.get('baseline_steal') or 0) * 100):.0f}% "
          f"and {((pu.get('during_steal') or 0) * 100):.0f}%. If the p99 outside the pass is far from the "
          f"baseline's, the machine's speed changed between the two and the ratio is not trustworthy.")
        L("")
        oc = max(pu.get("baseline_other_cpu") or 0, pu.get("during_other_cpu") or 0)
        if oc > 0.05:
            L(f"**Noisy machine:** other processes used up to {oc * 100:.0f}% of the CPUs during these loads.")
            L("")


def targets(L, args, clients, summ, ratio, st, pu, ip, wk, hd):
    L("## Targets")
    L("")
    L("| target | measured | goal | verdict |")
    L("|---|---:|---:|---|")
    for c in clients:
        L(target_line(f"pg_idem / handrolled TPS, {c} client(s)", ratio("pg_idem", "handrolled", c), 1.0))
    for num, den in (("consume", "inbox"), ("consume_batch", "inbox_batch")):
        for c in clients:
            L(target_line(f"{num} / {den} TPS, {c} client(s)", ratio(num, den, c), 1.0))
    for c in clients:
        L(target_line(f"pg_idem / plpgsql TPS, {c} client(s)", ratio("pg_idem", "plpgsql", c), 1.3))
    for c in clients:
        L(target_line(f"replay / pg_idem TPS, {c} client(s)", ratio("replay", "pg_idem", c), 4.0))
    def pct(v):
        return f"{v * 100:.1f}%"

    for sc in ("pg_idem", "lease", "contended"):
        keys = [k for k in summ if k.startswith(sc + "@")]
        u = sum(summ[k]["idem_updates"] for k in keys)
        h = sum((summ[k]["idem_hot_share"] or 0) * summ[k]["idem_updates"] for k in keys)
        if u:
            L(target_line(f"HOT share of idem_complete ({sc})", h / u, 0.95, fmt_v=pct))
    for body in ("nobody", "body"):
        a, b = st.get(f"pg_idem_{body}"), st.get(f"handrolled_{body}")
        if a and b:
            L(target_line(f"bytes/key vs handrolled ({'no body' if body == 'nobody' else 'small body'})",
                          a["per_key"], b["per_key"], higher_is_better=False, fmt_v=lambda v: f"{v:,.0f} B"))
    if wk:
        L(target_line(f"purge worker rate ({fmt(wk['keys'])} keys)", wk["keys_per_s"], 50_000.0,
                      fmt_v=lambda v: f"{v:,.0f}/s"))
    if ip:
        L(target_line(f"idem_purge() rate ({fmt(ip['keys'])} keys)", ip["keys_per_s"], 100_000.0,
                      fmt_v=lambda v: f"{v:,.0f}/s"))
    if pu.get("baseline_p99_ms") and pu.get("during_p99_ms"):
        L(target_line("claim p99 during purge / baseline", pu["during_p99_ms"] / pu["baseline_p99_ms"], 3.0,
                      higher_is_better=False))
    L("")


def scenarios_and_end(L, args, clients, out, lines):
    if args.smoke:
        L("_Smoke mode: a few seconds per run and small key counts; it proves the suite works, the numbers "
          "mean little._")
        L("")
    L("## Scenarios")
    L("")
    for sc in SCENARIOS:
        L(f"- `{sc}` ({'%d clients' % args.contended_clients if sc == 'contended' else ', '.join(map(str, clients)) + ' clients'}): {DESCRIPTIONS[sc]} — `bench/scenarios/{sc}.sql`")
    L("")
    L("Where the time goes, per step and per function (perf with call chains, `bench/diagnostics/perf.sh`; "
      "pg_stat_statements, `bench/diagnostics/breakdown.sh`): `docs/benchmarks.md`, section *Where the time goes*, "
      "with the raw profiles of the last report in `bench/report/perf.md`.")
    L("")
    L("Raw per-round numbers: `results.json`; server log: `server.log`.")
    (out / "report.md").write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------


def render(out: Path, results: dict) -> None:
    """Writes out/tps.svg and out/report.md from `results` (as run.py stores them)."""
    args = SimpleNamespace(**results["args"])
    summ = results.get("summary") or summarize(results)
    (out / "tps.svg").write_text(svg_chart(summ, SCENARIOS, args.clients, args.contended_clients,
                                           "pg_idem benchmark: TPS per scenario and client count"
                                           + (" (SMOKE)" if args.smoke else "")))
    write_report(out, args, results, summ, results.get("problems", []))

