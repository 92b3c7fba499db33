"""Fixtures of the tests that need PostgreSQL: clients/python/test.sh starts a throwaway server
with pg_idem (scripts/lib/pg.sh) and names it in PG_IDEM_HTTP_TEST_DSN; each test module gets a
database of its own. Servers under test run for real on loopback (uvicorn, Django's WSGI
server) and are called with httpx."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import psycopg
import pytest


def admin_dsn() -> str:
    dsn = os.environ.get("PG_IDEM_HTTP_TEST_DSN")
    if not dsn:
        pytest.skip("needs PostgreSQL with pg_idem: run clients/python/test.sh")
    return dsn


def with_dbname(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def new_database(extension: bool = True) -> Iterator[str]:
    admin = admin_dsn()
    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = with_dbname(admin, name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if extension:
                conn.execute("CREATE EXTENSION pg_idem")
            conn.execute("CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text,"
                         " idem_key text, amount bigint, order_id bigint)")
        yield dsn
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with new_database() as value:
        yield value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AsgiServer:
    """uvicorn serving make_app(pool) in a thread of its own, with its own event loop."""

    def __init__(self, dsn: str, make_app: Callable[[Any], Any]) -> None:
        self.dsn, self.make_app = dsn, make_app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.started = threading.Event()
        self.finished = threading.Event()
        self.server: Any = None

    async def _main(self) -> None:
        import uvicorn
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=8, open=False,
                                   kwargs={"prepare_threshold": None})
        await pool.open(wait=True)
        try:
            config = uvicorn.Config(self.make_app(pool), host="127.0.0.1", port=self.port,
                                    log_level="critical", lifespan="on")
            self.server = uvicorn.Server(config)
            self.started.set()
            await self.server.serve()
        finally:
            await pool.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except SystemExit:  # uvicorn's answer to a failed startup: the app refused to start
            pass
        finally:
            self.started.set()
            self.finished.set()

    def __enter__(self) -> "AsgiServer":
        threading.Thread(target=self._run, daemon=True).start()
        self.started.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.finished.is_set():
            if self.server is not None and self.server.started:
                return self
            time.sleep(0.02)
        return self  # did not start: .running is False

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.started and not self.finished.is_set()

    def __exit__(self, *exc: Any) -> None:
        if self.server is not None:
            self.server.should_exit = True
        self.finished.wait(30)


class Process:
    """A server started as its user starts it (python -m ...), on a free port."""

    def __init__(self, argv: list) -> None:
        import subprocess
        import tempfile

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([a.replace("{port}", str(self.port)) for a in argv],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def __enter__(self) -> "Process":
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
