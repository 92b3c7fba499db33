#!/usr/bin/env python3
"""Runs client suites (cargo test binaries) side by side, for the test command.

    scripts/lib/run_suites.py [--jobs N] CARGO_TEST_ARGS... [-- LIBTEST_ARGS...]

`cargo test` runs its test binaries one after another. The client suites spend most of their
time waiting (servers starting, sleeps past a lease, fsync), so one suite at a time leaves the
machine idle: this builds them with `cargo test --no-run` and runs up to N binaries at once
(default 3 on 2 cores), the longest first (their seconds of the last run are kept in
target/suite-seconds.json). Each binary's output is printed whole when it ends, after cargo's
usual "Running" line, so its "test result:" line counts as under cargo test.

Each binary also gets libtest's --report-time, so each test's line carries its seconds (the test
command lists the slowest). libtest takes that flag only with -Z unstable-options, which it
allows on a stable toolchain when RUSTC_BOOTSTRAP is set: it is set for the test binaries
alone, never for cargo or rustc, so nothing is built differently.

Exits 0 when the build and every binary passed, else 1 (every binary runs, as with
--no-fail-fast).
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECONDS_FILE = ROOT / "target" / "suite-seconds.json"


def parse_args(argv):
    jobs = 3
    if len(argv) >= 2 and argv[0] == "--jobs":
        jobs = int(argv[1])
        argv = argv[2:]
    if "--" in argv:
        cut = argv.index("--")
        return jobs, argv[:cut], argv[cut + 1 :]
    return jobs, argv, []


def build(cargo_args):
    """The test binaries cargo would run: (name, executable, package directory)."""
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    proc = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in proc.stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        directory = Path(message["manifest_path"]).parent
        # keyed by package too: the rules crate and the client suites both have "decisions"
        name = f"{directory.name}/{target['name']}"
        binaries.append((name, message["executable"], str(directory), target["src_path"]))
    return proc.returncode, binaries


def main():
    jobs, cargo_args, libtest_args = parse_args(sys.argv[1:])
    rc, binaries = build(cargo_args)
    if rc != 0:
        print("run_suites: the build failed", file=sys.stderr)
        return 1
    try:
        last = json.loads(SECONDS_FILE.read_text())
    except (OSError, ValueError):
        last = {}
    # the longest first, so no long suite starts last; one never timed counts as long
    edition = os.environ.get("PG_IDEM_EDITION", "native")
    binaries.sort(key=lambda b: -last.get(f"{edition}:{b[0]}", 1e9))
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    lock = threading.Lock()
    failed = []
    seconds = dict(last)
    queue = list(binaries)

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name, executable, directory, source = queue.pop(0)
            started = time.monotonic()
            proc = subprocess.run(
                [executable, *libtest_args, "-Z", "unstable-options", "--report-time"],
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            took = time.monotonic() - started
            with lock:
                seconds[f"{edition}:{name}"] = round(took, 1)
                if proc.returncode != 0:
                    failed.append(name)
                sys.stdout.write(f"     Running {os.path.relpath(source, ROOT)} ({executable}, {took:.1f} s)\n")
                sys.stdout.flush()
                sys.stdout.buffer.write(proc.stdout)
                sys.stdout.flush()

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        SECONDS_FILE.parent.mkdir(parents=True, exist_ok=True)
        SECONDS_FILE.write_text(json.dumps(seconds, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass
    if failed:
        print(f"run_suites: failed: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
