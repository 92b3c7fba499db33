"""The Django decorator through the Django reference app, served by Django's WSGI server as a
process of its own, called over loopback with httpx, on a real PostgreSQL with pg_idem."""

from __future__ import annotations

import io
import json
import sys
import uuid

import httpx
import psycopg
import pytest

from conftest import Process, new_database
from pg_idem_http.core import CONTRACT, error_body

KEY = CONTRACT["defaults"]["key_header"]
REPLAY = CONTRACT["defaults"]["replay_header"]
APP = CONTRACT["reference_app"]


def django_app(dsn):
    return Process([sys.executable, "-m", "pg_idem_http.reference.django_app", "--dsn", dsn,
                    "--port", "{port}"])


@pytest.fixture(scope="module")
def server(dsn):
    with django_app(dsn) as srv:
        assert srv.proc.poll() is None, srv.output()
        yield srv


def post(server, path, key=None, tenant="acme", body=None):
    headers = {}
    if key is not None:
        headers[KEY] = key
    if tenant is not None:
        headers["X-Tenant"] = tenant
    return httpx.post(server.url + path, json=body or {"amount": 5}, headers=headers, timeout=10)


def counts(server):
    r = httpx.get(server.url + "/_pg_idem/outcomes", timeout=10)
    assert r.headers["content-type"] == "application/json"
    return r.json()


def test_tenant_missing(server):
    r = post(server, "/payments", str(uuid.uuid4()), tenant=None)
    assert (r.status_code, r.content) == (400, error_body(
        "tenant_missing", CONTRACT["errors"]["tenant_missing"]["message"]))


def test_the_raw_target_is_fingerprinted(server):
    key = str(uuid.uuid4())
    assert post(server, "/orders/7/pay?c=%41", key).status_code == 201
    again = post(server, "/orders/7/pay?c=A", key)
    assert (again.status_code, again.headers.get(REPLAY)) == (201, "true")
    assert post(server, "/orders/8/pay?c=A", key).status_code == 422
    assert post(server, "/orders/7/pay?c=%2F", key).status_code == 422


def test_commit_through_the_api_is_refused(server, dsn):
    key = str(uuid.uuid4())
    r = post(server, "/payments", key, body={"amount": 5, "commit": "api"})
    assert r.status_code == 500
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM payments WHERE idem_key = %s",
                            (key,)).fetchone() == (0,)


def test_commit_as_sql_is_transaction_ended(server):
    before = counts(server)["transaction_ended"]
    key = str(uuid.uuid4())
    r = post(server, "/payments", key, body={"amount": 5, "commit": "sql"})
    assert (r.status_code, json.loads(r.content)["error"]) == (500, "internal_error")
    assert counts(server)["transaction_ended"] == before + 1
    assert post(server, "/payments", key, body={"amount": 5, "commit": "sql"}).status_code == 409


def test_outcomes_and_headers(server):
    before = counts(server)
    assert list(before) == CONTRACT["outcomes"]
    key = str(uuid.uuid4())
    body = {"amount": 5, "links": True, "set_cookie": True}
    first = post(server, "/payments", key, body=body)
    assert first.headers["set-cookie"].startswith(APP["cookie"].split(";")[0])
    again = post(server, "/payments", key, body=body)
    assert again.headers["link"] == ", ".join(APP["links"])
    assert "set-cookie" not in again.headers
    after = counts(server)
    for name in ("claimed", "stored", "replayed"):
        assert after[name] == before[name] + 1


def test_it_refuses_to_start_without_pg_idem():
    with new_database(extension=False) as bare, django_app(bare) as srv:
        assert srv.proc.wait(30) != 0
        assert "not installed" in srv.output()


@pytest.mark.parametrize("environ,target", [
    # the server's raw target first (gunicorn RAW_URI, uWSGI REQUEST_URI): %2F survives
    ({"RAW_URI": "/a%2fb/%7e?x=%41", "PATH_INFO": "/a/b/~", "QUERY_STRING": "x=%41"},
     "/a%2Fb/~?x=A"),
    ({"REQUEST_URI": "/a%2Fb?", "PATH_INFO": "/a/b", "QUERY_STRING": ""}, "/a%2Fb"),
    # else the decoded PATH_INFO (WSGI: bytes as latin-1) escaped again
    ({"PATH_INFO": "/a/b", "QUERY_STRING": "x=%41"}, "/a/b?x=A"),
    ({"PATH_INFO": "/caf\xc3\xa9", "QUERY_STRING": ""}, "/caf%C3%A9"),
    ({"SCRIPT_NAME": "/api", "PATH_INFO": "/p q", "QUERY_STRING": "a=b"}, "/api/p%20q?a=b"),
])
def test_the_target_of_a_wsgi_request(environ, target):
    from django.conf import settings

    if not settings.configured:
        settings.configure()
    from django.core.handlers.wsgi import WSGIRequest

    from pg_idem_http.django import target_of

    base = {"REQUEST_METHOD": "POST", "wsgi.input": io.BytesIO(), "SCRIPT_NAME": ""}
    assert target_of(WSGIRequest({**base, **environ})) == target
