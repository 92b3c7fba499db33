"""Fixtures of the HTTP conformance suite: the contract, the servers run.sh started, and each
reference app of clients/apps.json started once per mode (as a real process on a free port)."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import time

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRACT = json.loads((ROOT / "clients" / "contract.json").read_text())
APPS = json.loads((ROOT / "clients" / "apps.json").read_text())
MODES = os.environ.get("PG_IDEM_HTTP_MODES", "native sql pooler").split()
SELECTED = os.environ.get("PG_IDEM_HTTP_APPS", "").split() or list(APPS)
LOGS = pathlib.Path(os.environ.get("PG_IDEM_HTTP_LOGS", "/tmp/pg_idem_http_logs"))


def dsn_of(mode):
    dsn = os.environ.get(f"PG_IDEM_HTTP_DSN_{mode.upper()}")
    if not dsn:
        pytest.fail(f"no server for mode {mode}: run the suite through clients/conformance/run.sh")
    return dsn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    """One reference app process, started as clients/apps.json says."""

    def __init__(self, name, mode):
        self.name, self.mode, self.dsn = name, mode, dsn_of(mode)
        self.proc = None
        self.port = None

    def start(self):
        self.port = free_port()
        argv = [a.replace("{dsn}", self.dsn).replace("{port}", str(self.port)) for a in APPS[self.name]]
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = LOGS / f"{self.name}-{self.mode}-{self.port}.log"
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"{self.name} did not listen on {self.port} within 60 s:\n{self.log.read_text()[-3000:]}")

    def kill(self):
        """SIGKILL: no handler runs, no transaction is ended by the app."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def running_apps():
    started = {}

    def get(name, mode):
        if (name, mode) not in started:
            started[(name, mode)] = App(name, mode).start()
        return started[(name, mode)]

    yield get
    for app in started.values():
        app.stop()


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        pairs = [(a, m) for m in MODES for a in SELECTED]
        metafunc.parametrize("target", pairs, ids=[f"{a}-{m}" for a, m in pairs], indirect=True)
    if "mode" in metafunc.fixturenames:
        metafunc.parametrize("mode", MODES)


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (run.sh's -n), every test of one app in one mode runs on the same
    worker (--dist loadgroup): each app process starts once, as without workers, and the apps'
    connection pools stay within the servers' max_connections. Only the groups run side by
    side: most of the suite waits (hung handlers, leases running out, retries)."""
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if params and "target" in params:
            app, mode = params["target"]
            item.add_marker(pytest.mark.xdist_group(name=f"{app}-{mode}"))


@pytest.fixture
def target(request, running_apps):
    name, mode = request.param
    return running_apps(name, mode)


@pytest.fixture
def db(target):
    with psycopg.connect(target.dsn, autocommit=True, prepare_threshold=None) as conn:
        yield conn


def idem_schema(conn):
    """pg_idem's schema, found as the packages find it (the contract's sql.locate), quoted: the
    suite's own calls are qualified too, as the databases' search_path starts with look-alikes."""
    return psycopg.RawCursor(conn).execute(CONTRACT["sql"]["locate"]).fetchone()[0]
