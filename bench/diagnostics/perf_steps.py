#!/usr/bin/env python3
"""Reads `perf script -F comm,pid,tid,ip,sym,dso` output (call chains, leaf first) on stdin and
prints CPU microseconds per transaction by step, as markdown (used by bench/diagnostics/perf.sh).

    perf script -i perf.data -F comm,pid,tid,ip,sym,dso | python3 bench/diagnostics/perf_steps.py --hz 499 --txns N

A sample of a server backend is put in the first step whose function is on its call chain, in
this order: one of pg_idem's functions (`idem_*_wrapper`, the C entry points pgrx generates),
the commit (`CommitTransactionCommand`, which includes the WAL flush), the executor's run of a
statement (`standard_ExecutorRun`: the SQL statements' own work, pgbench's INSERTs and the
hand-written inbox's INSERT ... ON CONFLICT), the executor's start and end, the rest of the
bind/execute protocol (`PortalStart`, plan cache), then kernel time (the socket reads and
writes, scheduling) and the rest. The postgres binary is stripped (only exported functions
have names), so steps are keyed on exported functions. Idle time is left out.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

BACKGROUND = re.compile(r"^(WalWriterMain|CheckpointerMain|BackgroundWriterMain|AutoVac\w*Main|"
                        r"BackgroundWorkerMain|StartBackgroundWorker|PgArchiverMain|WalSndLoop)$")
IDEM = re.compile(r"^(idem_\w+)_wrapper$")
STEPS = [
    ("commit (CommitTransactionCommand, incl. WAL flush)", re.compile(r"^CommitTransactionCommand$")),
    ("executor run of SQL statements (standard_ExecutorRun)", re.compile(r"^(standard_)?ExecutorRun$")),
    ("executor start/finish/end", re.compile(r"^(standard_)?Executor(Start|Finish|End)$")),
    ("bind, portal, plan cache", re.compile(r"^(PortalStart|GetCachedPlan|PortalDrop|CreatePortal|"
                                             r"BuildCachedPlan|RevalidateCachedQuery)$")),
    ("transaction start", re.compile(r"^StartTransactionCommand$")),
]
KERNEL = "[kernel.kallsyms]"


def dso_class(dso: str) -> str:
    if dso == KERNEL:
        return "kernel"
    if dso.endswith("pg_idem.so"):
        return "pg_idem.so"
    if dso.endswith("/postgres"):
        return "postgres"
    if "libc" in dso:
        return "libc"
    return dso.rsplit("/", 1)[-1] or "?"


def clean(sym: str) -> str:
    """A Rust symbol without its offset, hash and generic noise."""
    sym = sym.split("+0x")[0]
    sym = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    return sym


def samples(stream):
    head, frames = None, []
    for line in stream:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
            continue
        if not line[0].isspace() and head is None:
            head = line
            continue
        m = re.match(r"\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", line)
        if m:
            frames.append((m.group(2), m.group(3)))
        elif head is not None and not line[0].isspace():
            yield head, frames
            head, frames = line, []
    if head is not None:
        yield head, frames


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hz", type=float, required=True)
    ap.add_argument("--txns", type=int, required=True)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--top-inclusive", type=int, default=25)
    a = ap.parse_args()
    us_per_sample = 1e6 / a.hz / max(1, a.txns)

    steps = collections.Counter()
    inside_dso = collections.defaultdict(collections.Counter)
    inside_sym = collections.defaultdict(collections.Counter)
    inclusive = collections.defaultdict(collections.Counter)   # pg_idem.so functions on the chain
    total = 0
    for head, frames in samples(sys.stdin):
        comm = head.split()[0]
        if comm == "swapper" or head.split()[1].startswith("0/"):
            continue   # idle
        total += 1
        syms = [s.split("+")[0] for s, _ in frames]
        leaf_sym, leaf_dso = (frames[0] if frames else ("?", "?"))
        leaf_sym = leaf_sym.split("+")[0]
        if comm == "pgbench":
            steps["pgbench (the client)"] += 1
            continue
        if comm != "postgres":
            steps[f"other processes ({comm})" if comm in ("perf",) else "other processes"] += 1
            continue
        if any(BACKGROUND.match(s) for s in syms):
            steps["server background processes (WAL writer, checkpointer, ...)"] += 1
            continue
        step = None
        for s in syms:
            m = IDEM.match(s)
            if m:
                step = f"`{m.group(1)}` (pg_idem)"
                break
        if step is None:
            for name, rx in STEPS:
                if any(rx.match(s) for s in syms):
                    step = name
                    break
        if step is None:
            step = ("backend, kernel: socket reads/writes, scheduling" if leaf_dso == KERNEL
                    else "backend, other (protocol, memory contexts, ...)")
        steps[step] += 1
        inside_dso[step][dso_class(leaf_dso)] += 1
        inside_sym[step][f"{leaf_sym} ({dso_class(leaf_dso)})"] += 1
        if step.startswith("`idem_"):
            for name in {clean(s) for s, d in frames if d.endswith("pg_idem.so")}:
                inclusive[step][name] += 1

    print(f"CPU samples (not idle): {total}, {a.hz:g} Hz on every CPU; "
          f"{total * us_per_sample:.0f} µs of CPU per transaction in all.")
    print()
    print("| step | µs CPU / txn | share | where (leaf function's binary) |")
    print("|---|---:|---:|---|")
    for step, n in steps.most_common():
        where = ", ".join(f"{d} {c / n * 100:.0f}%" for d, c in inside_dso[step].most_common(4))
        print(f"| {step} | {n * us_per_sample:.1f} | {n / max(1, total) * 100:.1f}% | {where} |")
    for step in [s for s in steps if s.startswith("`idem_") or s.startswith("executor run")]:
        n = steps[step]
        print()
        print(f"Hottest leaf functions in {step} (µs CPU / txn, share of the step):")
        print()
        for sym, c in inside_sym[step].most_common(a.top):
            print(f"- {sym}: {c * us_per_sample:.1f} µs ({c / n * 100:.0f}%)")
        if inclusive.get(step):
            print()
            print(f"pg_idem.so functions on the call chain in {step}, inclusive (µs CPU / txn, share of the step; "
                  "inlined functions do not appear):")
            print()
            for sym, c in inclusive[step].most_common(a.top_inclusive):
                print(f"- {sym}: {c * us_per_sample:.1f} µs ({c / n * 100:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
