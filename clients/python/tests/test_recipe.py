"""The README's SQLAlchemy recipe, run as pasted: its block written to app.py, served by
uvicorn as a process of its own, called over loopback on a real PostgreSQL with pg_idem."""

from __future__ import annotations

import os
import pathlib
import re
import sys
import uuid

import httpx
import psycopg
import pytest

from conftest import Process

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
KEY = "Idempotency-Key"


def recipe() -> str:
    found = re.findall(r"<!-- recipe: sqlalchemy app\.py -->\n```python\n(.*?)```",
                       README.read_text(), re.S)
    assert len(found) == 1, "README.md has no marked SQLAlchemy recipe"
    return found[0]


@pytest.fixture(scope="module")
def server(dsn, tmp_path_factory):
    pytest.importorskip("sqlalchemy")
    here = tmp_path_factory.mktemp("recipe")
    (here / "app.py").write_text(recipe())
    os.environ["DATABASE_URL"] = dsn
    try:
        proc = Process([sys.executable, "-m", "uvicorn", "--app-dir", str(here), "app:app",
                        "--host", "127.0.0.1", "--port", "{port}"])
    finally:
        del os.environ["DATABASE_URL"]
    with proc as srv:
        assert srv.proc.poll() is None, srv.output()
        yield srv


def post(server, path, key, tenant="acme"):
    headers = {KEY: key, "X-Tenant": tenant} if tenant else {KEY: key}
    return httpx.post(server.url + path, content=b'{"amount": 5}', headers=headers, timeout=10)


def test_the_orm_write_and_the_response_commit_together(server, dsn):
    key = str(uuid.uuid4())
    first = post(server, "/orders/7/pay", key)
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    again = post(server, "/orders/7/pay", key)
    assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (
        201, first.content, "true")
    assert again.headers["location"] == first.headers["location"]
    assert post(server, "/orders/8/pay", key).status_code == 422
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT order_id FROM payments WHERE idem_key = %s",
                            (key,)).fetchall() == [(7,)]


def test_no_tenant_is_400(server):
    r = post(server, "/orders/7/pay", str(uuid.uuid4()), tenant=None)
    assert (r.status_code, r.json()["error"]) == (400, "tenant_missing")
