#!/usr/bin/env python3
"""What the client packages' middleware costs per request: each package's reference app against
the same POST /payments written by hand (bench/http/), on one server, in alternating rounds, so
that the ratio comes from one run on this noisy machine.

    python3 bench/runners/http_middleware.py --smoke          # CI: 1 round x 2 s per run, 2 clients
    python3 bench/runners/http_middleware.py                  # 3 rounds x 20 s per run, 8 clients
    python3 bench/runners/http_middleware.py --pairs python --clients 1 --duration 10

Pairs: python (FastAPI), node (Express), rust (axum; release builds, debug in smoke mode).

Two workloads per app: fresh (a new key per request: claim, insert, completion, commit) and
replay (a set of completed keys asked again). The load generator is Python threads with one
keep-alive HTTP connection each; it runs on the same 2 cores as the apps and the server, the same
for both sides of a pair. Every answer is checked: a fresh request must be 201 without the replay
header, a replay 201 with it. Needs clients/setup.sh and pg_idem installed into the PostgreSQL in
PATH (scripts/install.sh). Writes results.json and report.md into --out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import threading
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for the package lib
from lib import REPO_DIR as REPO, BenchError, Server, log, median  # noqa: E402
from lib.environment import environment  # noqa: E402

VENV_PY = "clients/python/.venv/bin/python"
# pair -> (package's reference app, the same route with hand-written glue)
PAIRS = {
    "python": ([VENV_PY, "-m", "pg_idem_http.reference.fastapi_app"], [VENV_PY, "bench/http/handwritten_fastapi.py"]),
    "node": (["node", "clients/node/reference/express-app.js"], ["node", "bench/http/handwritten-express.js"]),
    # {profile}: debug in smoke mode (what clients/setup.sh built), else release (built here)
    "rust": (["target/{profile}/pg-idem-http-reference"], ["target/{profile}/handwritten-axum"]),
}
SIDES = ("package", "handwritten")
# one body for every request: the packages fingerprint the body's bytes
BODY = b'{"amount":100}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    def __init__(self, argv: list[str], dsn: str, log_path: Path):
        self.port = free_port()
        self.proc = subprocess.Popen(argv + ["--dsn", dsn, "--port", str(self.port)], cwd=REPO,
                                     stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"{argv} exited ({log_path}): {log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchError(f"{argv} did not listen within 60 s")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def load(port: int, clients: int, seconds: float, keys: list[str] | None, tenant: str) -> dict:
    """Requests for `seconds` from `clients` threads: fresh keys when `keys` is None, else replays."""
    counts = [0] * clients
    errors: list[str] = []
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        while time.monotonic() < stop and not errors:
            key = keys[(i + n * clients) % len(keys)] if keys else str(uuid.uuid4())
            t0 = time.perf_counter()
            conn.request("POST", "/payments", body=BODY, headers={
                "Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant": tenant})
            r = conn.getresponse()
            r.read()
            latencies[i].append(time.perf_counter() - t0)
            replayed = r.getheader("Idempotent-Replayed") == "true"
            if r.status != 201 or replayed != (keys is not None):
                errors.append(f"{r.status} replayed={replayed} for key {key}")
            n += 1
        counts[i] = n
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise BenchError(f"unexpected answers: {errors[:5]}")
    lat = sorted(x for xs in latencies for x in xs)
    return {"requests": sum(counts), "seconds": elapsed, "rps": sum(counts) / elapsed,
            "p50_ms": 1000 * lat[len(lat) // 2], "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def prepare_replay_keys(port: int, n: int, tenant: str) -> list[str]:
    keys = [str(uuid.uuid4()) for _ in range(n)]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for key in keys:
        conn.request("POST", "/payments", body=BODY, headers={
            "Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant": tenant})
        r = conn.getresponse()
        r.read()
        if r.status != 201:
            raise BenchError(f"preparing replay keys: {r.status}")
    conn.close()
    return keys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--pairs", default=",".join(PAIRS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "http-middleware"))
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.duration, args.clients = 1, 2, 2
    pairs = args.pairs.split(",")
    profile = "debug" if args.smoke else "release"
    if "rust" in pairs:
        # the reference app and its hand-written twin, built alike
        subprocess.run(["cargo", "build", "-q", *(["--release"] if profile == "release" else []),
                        "-p", "pg-idem-http", "--bin", "pg-idem-http-reference",
                        "-p", "handwritten-axum", "--bin", "handwritten-axum"],
                       cwd=REPO, check=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the apps' output, for a failure's diagnosis: not part of the report
    logs = Path(tempfile.mkdtemp(prefix="pg_idem_http_bench."))

    server = Server(["shared_preload_libraries = 'pg_idem'", "pg_idem.purge_interval = 0",
                     "shared_buffers = '256MB'" if args.smoke else "shared_buffers = '2GB'",
                     "max_wal_size = '16GB'", "checkpoint_timeout = '30min'", "max_connections = 100"])
    server.start()
    apps: dict[tuple[str, str], App] = {}
    results = {"args": vars(args), "runs": []}
    try:
        server.execute("CREATE EXTENSION pg_idem; CREATE TABLE payments (id bigserial PRIMARY KEY,"
                       " tenant text NOT NULL, idem_key text NOT NULL, amount bigint NOT NULL);")
        results["environment"] = environment(server)
        dsn = f"postgresql://postgres@127.0.0.1:{server.port}/postgres"
        for pair in pairs:
            for side, argv_ in zip(SIDES, PAIRS[pair]):
                argv_ = [a.replace("{profile}", profile) for a in argv_]
                apps[(pair, side)] = App(argv_, dsn, logs / f"{pair}-{side}.log")
        replay_keys = {k: prepare_replay_keys(app.port, 200 if not args.smoke else 20, f"replay-{k[0]}-{k[1]}")
                       for k, app in apps.items()}
        for rnd in range(args.rounds):
            for pair in pairs:
                # ABBA: the side that goes first alternates by round
                order = SIDES if rnd % 2 == 0 else SIDES[::-1]
                for workload in ("fresh", "replay"):
                    for side in order:
                        app = apps[(pair, side)]
                        keys = replay_keys[(pair, side)] if workload == "replay" else None
                        r = load(app.port, args.clients, args.duration, keys, f"{workload}-{pair}-{side}")
                        r.update(round=rnd, pair=pair, side=side, workload=workload)
                        results["runs"].append(r)
                        log(f"round {rnd} {pair:6} {workload:6} {side:11} {r['rps']:8.1f} req/s "
                            f"p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms")
    finally:
        for app in apps.values():
            app.stop()
        server.stop()

    lines = ["| app | workload | package req/s | hand-written req/s | ratio (per round) | median ratio |",
             "|---|---|---|---|---|---|"]
    summary = {}
    for pair in pairs:
        for workload in ("fresh", "replay"):
            def runs(side):
                return [r for r in results["runs"] if (r["pair"], r["workload"], r["side"]) == (pair, workload, side)]
            ratios = [a["rps"] / b["rps"] for a, b in zip(runs("package"), runs("handwritten"))]
            summary[f"{pair}/{workload}"] = median(ratios)
            lines.append(f"| {pair} | {workload} | {median([r['rps'] for r in runs('package')]):.1f} | "
                         f"{median([r['rps'] for r in runs('handwritten')]):.1f} | "
                         f"{', '.join(f'{x:.2f}' for x in ratios)} | **{median(ratios):.2f}x** |")
    results["summary"] = summary
    (out / "results.json").write_text(json.dumps(results, indent=1))
    report = (f"# Middleware against hand-written glue\n\n`{' '.join(['python3', 'bench/runners/http_middleware.py'] + (argv or sys.argv[1:]))}`,"
              f" {time.strftime('%Y-%m-%d')}, {args.clients} clients, {args.rounds} rounds x {args.duration:g} s\n\n"
              + "\n".join(lines) + "\n")
    (out / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
