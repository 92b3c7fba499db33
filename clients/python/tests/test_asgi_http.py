"""The ASGI middleware under FastAPI and a real uvicorn, called over loopback with httpx, on a
real PostgreSQL with pg_idem: the rules of contract 2."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import psycopg
import pytest
from fastapi import FastAPI, Request, Response

from conftest import AsgiServer, new_database
from pg_idem_http import outcome_counts
from pg_idem_http.core import CONTRACT, Route, error_body
from pg_idem_http.fastapi import Idem, IdempotencyMiddleware, Lease

KEY = CONTRACT["defaults"]["key_header"]
REPLAY = CONTRACT["defaults"]["replay_header"]


def tenant(scope):
    return dict(scope["headers"]).get(b"x-tenant", b"").decode() or None


def make_app(**options):
    options.setdefault("tenant", tenant)

    def build(pool):
        app = FastAPI()
        app.add_middleware(IdempotencyMiddleware, pool=pool, routes=[
            Route("POST", "/pay/{name}", stored_headers=["content-type", "location", "link"]),
            Route("POST", "/orders/{id}/pay"),
            Route("POST", "/lease", lease="5 seconds"),
        ], **options)

        @app.post("/lease")
        async def leased(lease: Lease) -> Response:
            conn = await lease.begin()
            await conn.execute("INSERT INTO payments (tenant, idem_key, amount) VALUES (%s, %s, 2)",
                               (lease.tenant, lease.key))
            await conn.commit()  # refused: the package completes and commits
            return Response("{}", 201, media_type="application/json")

        @app.post("/pay/{name}")
        async def pay(name: str, request: Request, idem: Idem) -> Response:
            spec = json.loads(await request.body() or b"{}")
            cur = await idem.conn.execute(
                "INSERT INTO payments (tenant, idem_key, amount) VALUES (%s, %s, 1) RETURNING id",
                (idem.tenant, idem.key))
            (pid,) = await cur.fetchone()
            if spec.get("commit") == "api":
                await idem.conn.commit()
            if spec.get("rollback") == "api":
                await idem.conn.rollback()
            if spec.get("commit") == "sql":
                await idem.conn.execute("COMMIT")
            response = Response(json.dumps({"id": pid}), 201, media_type="application/json")
            for value in ("</a>", "</b>"):
                response.raw_headers.append((b"link", value.encode()))
            response.raw_headers.append((b"set-cookie", b"s=1"))
            return response

        @app.post("/orders/{id}/pay")
        async def order(id: int, idem: Idem) -> Response:
            return Response(f'{{"order":{id},"key":"{idem.key}"}}', 201,
                            media_type="application/json")

        return app
    return build


@pytest.fixture(scope="module")
def server(dsn):
    with AsgiServer(dsn, make_app()) as srv:
        assert srv.running
        yield srv


def post(server, path, key=None, tenant="acme", body=b"{}"):
    headers = {}
    if key is not None:
        headers[KEY] = key
    if tenant is not None:
        headers["X-Tenant"] = tenant
    return httpx.post(server.url + path, content=body, headers=headers, timeout=10)


def rows(dsn, key):
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM payments WHERE idem_key = %s",
                            (key,)).fetchone()[0]


def test_a_request_without_tenant_is_400_before_any_claim(server, dsn):
    key = str(uuid.uuid4())
    before = outcome_counts()["rejected"]
    r = post(server, "/pay/x", key, tenant=None)
    assert (r.status_code, r.content) == (400, error_body(
        "tenant_missing", CONTRACT["errors"]["tenant_missing"]["message"]))
    assert outcome_counts()["rejected"] == before + 1
    # nothing claimed: the same key runs with a tenant
    assert post(server, "/pay/x", key).status_code == 201


def test_the_target_is_part_of_the_fingerprint(server):
    key = str(uuid.uuid4())
    assert post(server, "/orders/7/pay", key).status_code == 201
    again = post(server, "/orders/7/pay", key)
    assert (again.status_code, again.headers[REPLAY]) == (201, "true")
    assert json.loads(again.content)["order"] == 7
    other = post(server, "/orders/8/pay", key)
    assert (other.status_code, json.loads(other.content)["error"]) == (422, "mismatch")
    query = post(server, "/orders/7/pay?coupon=x", key)
    assert query.status_code == 422


def test_the_target_is_normalised_from_the_raw_path(server):
    key = str(uuid.uuid4())
    assert post(server, "/pay/%7euser?q=%41", key).status_code == 201
    # the same target normalised: replayed, not a mismatch
    again = post(server, "/pay/~user?q=A", key)
    assert (again.status_code, again.headers.get(REPLAY)) == (201, "true")
    # a reserved character escaped is another target
    assert post(server, "/pay/%7euser?q=%41%2F", key).status_code == 422


def test_headers_are_stored_in_order_and_never_stored_ones_are_not(server):
    key = str(uuid.uuid4())
    first = post(server, "/pay/h", key)
    assert first.headers.get_list("link") == ["</a>", "</b>"]
    assert first.headers.get("set-cookie") == "s=1"  # the first response is the handler's
    again = post(server, "/pay/h", key)
    assert again.headers.get_list("link") == ["</a>", "</b>"]
    assert "set-cookie" not in again.headers
    assert again.content == first.content


@pytest.mark.parametrize("spec", [{"commit": "api"}, {"rollback": "api"}])
def test_the_handle_refuses_commit_and_rollback(server, dsn, spec):
    key = str(uuid.uuid4())
    before = outcome_counts()["rolled_back"]
    r = post(server, "/pay/c", key, body=json.dumps(spec).encode())
    assert r.status_code == 500
    assert rows(dsn, key) == 0  # the insert rolled back with the claim
    assert outcome_counts()["rolled_back"] == before + 1
    assert post(server, "/pay/c", key, body=json.dumps(spec).encode()).status_code == 500


def test_a_commit_sent_as_sql_is_transaction_ended(server, dsn, caplog):
    key = str(uuid.uuid4())
    before = outcome_counts()["transaction_ended"]
    with caplog.at_level(logging.ERROR, logger="pg_idem_http"):
        r = post(server, "/pay/s", key, body=b'{"commit": "sql"}')
    assert (r.status_code, json.loads(r.content)["error"]) == (500, "internal_error")
    assert outcome_counts()["transaction_ended"] == before + 1
    assert any("transaction_ended" in rec.getMessage() for rec in caplog.records)
    # the handler's COMMIT made its insert and the claim durable without a response
    assert rows(dsn, key) == 1
    retry = post(server, "/pay/s", key, body=b'{"commit": "sql"}')
    assert (retry.status_code, json.loads(retry.content)["error"]) == (409, "in_progress")


def test_every_outcome_is_counted(server):
    counts = outcome_counts()
    assert list(counts) == CONTRACT["outcomes"]
    key = str(uuid.uuid4())
    post(server, "/pay/o", key)
    post(server, "/pay/o", key)
    after = outcome_counts()
    assert after["claimed"] == counts["claimed"] + 1
    assert after["stored"] == counts["stored"] + 1
    assert after["replayed"] == counts["replayed"] + 1


def test_single_tenant(dsn):
    with AsgiServer(dsn, make_app(tenant=None, single_tenant="solo")) as srv:
        assert srv.running
        key = str(uuid.uuid4())
        assert post(srv, "/pay/t", key, tenant=None).status_code == 201
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT tenant FROM payments WHERE idem_key = %s",
                            (key,)).fetchone() == ("solo",)


@pytest.mark.parametrize("options,message", [
    ({"tenant": None}, "single_tenant"),
    ({"single_tenant": "x"}, "not both"),
])
def test_a_tenant_configuration_is_required(options, message):
    with pytest.raises(ValueError, match=message):
        IdempotencyMiddleware(FastAPI(), pool=None, routes=[Route("POST", "/p")],
                              **{"tenant": tenant, **options})


def test_a_never_stored_header_in_the_allow_list_is_refused():
    with pytest.raises(ValueError, match="set-cookie"):
        Route("POST", "/p", stored_headers=["content-type", "Set-Cookie"])


def _refused(dsn, **options):
    with AsgiServer(dsn, make_app(**options)) as srv:
        return not srv.running


def test_it_refuses_to_start_without_pg_idem(caplog):
    with new_database(extension=False) as bare, caplog.at_level(logging.ERROR, "pg_idem_http"):
        assert _refused(bare)
    assert "not installed" in caplog.text


def test_it_refuses_to_start_with_a_foreign_function(caplog):
    with new_database() as db:
        with psycopg.connect(db, autocommit=True) as conn:
            schema = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                                  " ON n.oid = e.extnamespace WHERE extname = 'pg_idem'"
                                  ).fetchone()[0]
            conn.execute("DROP ROLE IF EXISTS planter")
            conn.execute("CREATE ROLE planter")
            conn.execute(f"GRANT CREATE ON SCHEMA {schema} TO planter")
            conn.execute("SET ROLE planter")
            conn.execute(f"CREATE FUNCTION {schema}.idem_claim(text) RETURNS int"
                         " LANGUAGE sql AS 'SELECT 1'")
            conn.execute("RESET ROLE")
        try:
            with caplog.at_level(logging.ERROR, "pg_idem_http"):
                assert _refused(db)
            assert "idem_claim(text)" in caplog.text
        finally:
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(f"DROP FUNCTION {schema}.idem_claim(text)")
                conn.execute(f"REVOKE CREATE ON SCHEMA {schema} FROM planter")
                conn.execute("DROP ROLE planter")


def test_the_schema_option_and_an_old_version(dsn, caplog):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA IF NOT EXISTS "Old Idem"')
        conn.execute('CREATE OR REPLACE FUNCTION "Old Idem".idem_version() RETURNS text'
                     " LANGUAGE sql AS $$SELECT '0.4.9'$$")
    with caplog.at_level(logging.ERROR, "pg_idem_http"):
        assert _refused(dsn, schema="Old Idem")
    assert "0.4.9" in caplog.text and CONTRACT["min_pg_idem_version"] in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR, "pg_idem_http"):
        assert _refused(dsn, schema="nowhere")
    assert "nowhere" in caplog.text


def test_the_schema_option_names_where_pg_idem_is(dsn):
    with psycopg.connect(dsn) as conn:
        schema = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                              " ON n.oid = e.extnamespace WHERE extname = 'pg_idem'").fetchone()[0]
    with AsgiServer(dsn, make_app(schema=schema)) as srv:
        assert srv.running
        assert post(srv, "/pay/o", str(uuid.uuid4())).status_code == 201


def test_the_lease_completion_transaction_refuses_commit(server, dsn):
    key = str(uuid.uuid4())
    before = outcome_counts()
    assert post(server, "/lease", key).status_code == 500
    assert rows(dsn, key) == 0
    after = outcome_counts()
    assert after["rolled_back"] == before["rolled_back"] + 1
    # released: the retry is claimed at once, not after the lease
    assert post(server, "/lease", key).status_code == 500
    assert outcome_counts()["claimed"] == after["claimed"] + 1
