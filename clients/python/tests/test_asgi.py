"""The ASGI driver's ordering with a fake pool: the response leaves only after COMMIT."""

import asyncio
import json
from contextlib import asynccontextmanager

import psycopg
import pytest

from pg_idem_http.asgi import IdempotencyMiddleware
from pg_idem_http.core import CONTRACT, Route, error_response


class FakeCursor:
    def __init__(self, row):
        self.row = row

    async def fetchone(self):
        return self.row


class FakeConn:
    def __init__(self, log, claim_row, fail_on=None):
        self.log, self.claim_row, self.fail_on = log, claim_row, fail_on

    async def execute(self, sql, params=None):
        name = "claim" if "idem_claim" in sql else sql.split("(")[0].split()[-1]
        self.log.append(name)
        if self.fail_on and self.fail_on[0] in sql:
            raise self.fail_on[1]
        return FakeCursor(self.claim_row if name == "claim" else (None,))

    async def commit(self):
        self.log.append("COMMIT")

    async def rollback(self):
        self.log.append("ROLLBACK")


class FakePool:
    def __init__(self, conn):
        self.conn = conn

    @asynccontextmanager
    async def connection(self):
        yield self.conn

    async def getconn(self):
        return self.conn

    async def putconn(self, conn):
        pass


def claim_row(outcome="claimed", code=None, body=None):
    return ("POST /pay k", outcome, 1, 1, code, body, None, None, None)


def make_app(log, status, exc=None):
    async def app(scope, receive, send):
        assert scope["state"]["idem"].key == "k"
        await receive()
        log.append("handler")
        if exc:
            raise exc
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain"), (b"x-request-id", b"1")]})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


def run(mw, headers=((b"idempotency-key", b"k"),)):
    sent, log = [], mw.pool.conn.log

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        log.append("send")
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/pay", "headers": list(headers)}
    asyncio.run(mw(scope, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def middleware(status=201, row=None, exc=None, fail_on=None, lease=None):
    log = []
    conn = FakeConn(log, row or claim_row(), fail_on)
    return IdempotencyMiddleware(make_app(log, status, exc), pool=FakePool(conn),
                                 routes=[Route("POST", "/pay", lease=lease)])


def test_final_response_is_sent_after_commit():
    mw = middleware(201)
    status, headers, body = run(mw)
    assert (status, body) == (201, b"ok")
    assert mw.pool.conn.log == ["claim", "handler", "idem_complete", "COMMIT", "send", "send"]


def test_final_4xx_is_stored_with_fail_final():
    mw = middleware(402)
    assert run(mw)[0] == 402
    assert "idem_fail_final" in mw.pool.conn.log


@pytest.mark.parametrize("status", [500, 409, 429])
def test_non_final_rolls_back(status):
    mw = middleware(status)
    assert run(mw)[0] == status
    assert mw.pool.conn.log == ["claim", "handler", "ROLLBACK", "send", "send"]


def test_exception_rolls_back_and_propagates():
    mw = middleware(exc=RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        run(mw)
    assert mw.pool.conn.log[-1] == "ROLLBACK" and "send" not in mw.pool.conn.log


def test_failed_completion_is_an_error_and_nothing_is_sent_first():
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    mw = middleware(201, fail_on=("idem_complete", lost))
    status, headers, body = run(mw)
    assert (status, body) == (503, error_response("unavailable")[2])
    assert headers[b"retry-after"] == str(CONTRACT["defaults"]["retry_after_seconds"]).encode()
    assert "COMMIT" not in mw.pool.conn.log


def test_replay_sends_stored_bytes():
    stored = json.dumps({"http": 1, "headers": {"content-type": "text/plain"}, "body": "été"})
    mw = middleware(row=claim_row("completed", 201, stored))
    status, headers, body = run(mw)
    assert (status, body) == (201, "été".encode())
    assert headers[b"idempotent-replayed"] == b"true"
    assert "handler" not in mw.pool.conn.log


def test_missing_and_invalid_keys():
    assert run(middleware(), headers=())[2] == error_response("key_missing")[2]
    assert run(middleware(), headers=((b"idempotency-key", b"a b"),))[2] == error_response(
        "key_invalid")[2]


def test_lease_mode_commits_the_claim_then_completes_under_the_fence():
    mw = middleware(201, lease="1 second")
    assert run(mw)[0] == 201
    assert mw.pool.conn.log == ["claim", "COMMIT", "handler", "idem_assert_fence",
                                "idem_complete", "COMMIT", "send", "send"]


def test_lease_lost_is_409_and_not_released():
    lost = psycopg.errors.ObjectNotInPrerequisiteState("lease lost")
    mw = middleware(201, lease="1 second", fail_on=("idem_assert_fence", lost))
    status, _, body = run(mw)
    assert (status, body) == (409, error_response("lease_lost")[2])
    assert "idem_release" not in mw.pool.conn.log


def test_lease_non_final_releases():
    mw = middleware(503, lease="1 second")
    assert run(mw)[0] == 503
    assert mw.pool.conn.log[-3:] == ["idem_release", "send", "send"]
