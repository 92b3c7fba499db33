"""The fingerprint is computed by the database, inside the claim statement, from the contract's SQL:
so every package gets the same one. Checked here against each edition with the contract's vectors."""

import base64
import uuid

import psycopg
from conftest import CONTRACT, dsn_of

SQL = CONTRACT["sql"]


def run(mode, statement, params):
    with psycopg.connect(dsn_of(mode), autocommit=True, prepare_threshold=None) as conn:
        cur = psycopg.RawCursor(conn)  # the contract's statements use $n placeholders
        return cur.execute(statement, params).fetchone()


def claim(mode, method, route, key, body, fields=None):
    """The contract's claim statement, as a package runs it, in a transaction rolled back."""
    fingerprint = SQL["fingerprint_fields" if fields else "fingerprint_body"]
    statement = SQL["claim"].replace("{fingerprint}", fingerprint)
    params = ["fp-test", method, route, key, body, None, None, "0", "0"] + ([fields] if fields else [])
    with psycopg.connect(dsn_of(mode), prepare_threshold=None) as conn:
        row = psycopg.RawCursor(conn).execute(statement, params).fetchone()
        conn.rollback()
    return row


def test_the_body_fingerprint_matches_the_vectors(mode):
    for v in CONTRACT["vectors"]["fingerprint_body"]:
        expression = SQL["fingerprint_body"]
        # only $2, $3 and $5 appear: typed through a derived table that names the others
        got = run(mode, f"SELECT {expression} FROM (SELECT $1::text, $4::text) AS unused",
                  [None, v["method"], v["route"], None, base64.b64decode(v["body_base64"])])[0]
        assert got == v["fingerprint"], v


def test_the_claim_scopes_the_key_by_method_and_route(mode):
    key = str(uuid.uuid4())
    row = claim(mode, "post", "/orders/{id}", key, b"{}")
    assert row[0] == f"POST /orders/{{id}} {key}"
    assert row[1] == "claimed"


def test_the_fields_fingerprint_ignores_order_whitespace_and_other_fields(mode):
    statement = (f"SELECT {SQL['fingerprint_fields']}"
                 " FROM (SELECT $1::text, $4::text, $6::text, $7::text, $8::text, $9::text) AS unused")

    def fp(body, fields):
        return run(mode, statement, [None, "POST", "/payments", None, body, None, None, None, None, fields])[0]

    base = fp(b'{"amount": 1250, "currency": "EUR", "note": "a"}', ["amount", "currency"])
    assert fp(b'{"currency":"EUR","note":"b","amount":1250}', ["amount", "currency"]) == base
    assert fp(b'{"currency":"EUR","amount":1251}', ["amount", "currency"]) != base
    assert fp(b'{"amount":1250}', ["amount", "currency"]) != base  # a missing field counts as null
