"""The fingerprint is computed by the database, inside the claim statement, from the contract's SQL:
so every package gets the same one. Checked here against each edition with the contract's vectors,
with the statements qualified as the packages qualify them (sql.locate)."""

import base64
import uuid

import psycopg
from conftest import CONTRACT, dsn_of, idem_schema

SQL = CONTRACT["sql"]


def connect(mode, **kwargs):
    return psycopg.connect(dsn_of(mode), prepare_threshold=None, **kwargs)


def qualified(conn, statement):
    return statement.replace("{schema}", idem_schema(conn))


def run(mode, statement, params):
    with connect(mode, autocommit=True) as conn:
        cur = psycopg.RawCursor(conn)  # the contract's statements use $n placeholders
        return cur.execute(qualified(conn, statement), params).fetchone()


def claim(mode, method, route, key, body, target, fields=None):
    """The contract's claim statement, as a package runs it, in a transaction rolled back."""
    fingerprint = SQL["fingerprint_fields" if fields else "fingerprint_body"]
    with connect(mode) as conn:
        statement = qualified(conn, SQL["claim"].replace("{fingerprint}", fingerprint))
        params = ["fp-test", method, route, key, body, None, None, "0", "0", target] + ([fields] if fields else [])
        row = psycopg.RawCursor(conn).execute(statement, params).fetchone()
        conn.rollback()
    return row


def test_the_body_fingerprint_matches_the_vectors(mode):
    for v in CONTRACT["vectors"]["fingerprint_body"]:
        expression = SQL["fingerprint_body"]
        # only $2, $5 and $10 appear: typed through a derived table that names the others
        names = ", ".join(f"${n}::text" for n in (1, 3, 4, 6, 7, 8, 9))
        params = [None, v["method"], None, None, base64.b64decode(v["body_base64"])] + [None] * 4 + [v["target"]]
        got = run(mode, f"SELECT {expression} FROM (SELECT {names}) AS unused", params)[0]
        assert got == v["fingerprint"], v


def test_the_claim_scopes_the_key_by_method_and_route(mode):
    key = str(uuid.uuid4())
    row = claim(mode, "post", "/orders/{id}", key, b"{}", "/orders/7")
    assert row[0] == f"POST /orders/{{id}} {key}"
    assert row[1] == "claimed"


def test_the_target_is_part_of_the_fingerprint_and_the_route_of_the_scope(mode):
    """Requests to one route template with the same key and body: one stored key (one scope),
    and only the request that was actually sent first replays; another resource or another
    query string is a mismatch."""
    tenant, key = f"fp-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    with connect(mode) as conn:
        statement = qualified(conn, SQL["claim"].replace("{fingerprint}", SQL["fingerprint_body"]))
        complete = qualified(conn, SQL["complete"])
        cur = psycopg.RawCursor(conn)

        def claim_as(target):
            row = cur.execute(statement, [tenant, "POST", "/orders/{id}/pay", key, b"{}", None, None,
                                          "0", "0", target]).fetchone()
            return row

        first = claim_as("/orders/7/pay")
        assert (first[0], first[1]) == (f"POST /orders/{{id}}/pay {key}", "claimed")
        envelope = '{"http": 2, "headers": {}, "body": ""}'
        assert cur.execute(complete, [tenant, first[0], first[2], 201, envelope, first[9]]).fetchall() != []
        conn.commit()
        for target, outcome in [("/orders/7/pay", "completed"), ("/orders/8/pay", "mismatch"),
                                ("/orders/7/pay?x=1", "mismatch")]:
            assert claim_as(target)[1] == outcome, target
            conn.rollback()


def test_the_fields_fingerprint_ignores_order_whitespace_and_other_fields(mode):
    statement = (f"SELECT {SQL['fingerprint_fields']}"
                 " FROM (SELECT $1::text, $3::text, $4::text, $6::text, $7::text, $8::text, $9::text) AS unused")

    def fp(body, fields, target="/payments"):
        return run(mode, statement, [None, "POST", None, None, body, None, None, None, None, target, fields])[0]

    base = fp(b'{"amount": 1250, "currency": "EUR", "note": "a"}', ["amount", "currency"])
    assert fp(b'{"currency":"EUR","note":"b","amount":1250}', ["amount", "currency"]) == base
    assert fp(b'{"currency":"EUR","amount":1251}', ["amount", "currency"]) != base
    assert fp(b'{"amount":1250}', ["amount", "currency"]) != base  # a missing field counts as null
    assert fp(b'{"amount": 1250, "currency": "EUR"}', ["amount", "currency"], "/payments?x=1") != base
