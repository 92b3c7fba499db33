"""The core against the contract's vectors, read from the package's own copy of contract.json."""

import base64
import json
import pathlib
from importlib import resources

import pytest

from pg_idem_http import core
from pg_idem_http.core import (
    CONTRACT,
    Claim,
    Route,
    build_envelope,
    claim_params,
    error_body,
    error_for_exception,
    error_name_for_sqlstate,
    error_response,
    is_final,
    outcome_response,
    parse_key,
    replay,
)

PACKAGE_COPY = pathlib.Path(str(resources.files("pg_idem_http").joinpath("contract.json")))
SOURCE = pathlib.Path(__file__).resolve().parents[2] / "contract.json"  # clients/contract.json
VECTORS = CONTRACT["vectors"]


def test_copy_is_the_source():
    if not SOURCE.exists():
        pytest.skip("not in the repository: no clients/contract.json to compare with")
    assert PACKAGE_COPY.read_bytes() == SOURCE.read_bytes(), (
        "src/pg_idem_http/contract.json differs from clients/contract.json: run clients/sync-contract.sh"
    )


def test_contract_loaded_from_the_copy():
    assert CONTRACT == json.loads(PACKAGE_COPY.read_text("utf-8"))
    assert CONTRACT["contract_version"] == 1


@pytest.mark.parametrize("vector", VECTORS["key_header"], ids=lambda v: repr(v["header"])[:40])
def test_key_header(vector):
    assert parse_key(vector["header"]) == vector["key"]


def test_missing_key_header_is_none():
    assert parse_key(None) is None


@pytest.mark.parametrize("vector", VECTORS["final_status"], ids=lambda v: str(v["status"]))
def test_final_status(vector):
    assert is_final(vector["status"]) is vector["final"]


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=lambda v: v["envelope"]["headers"].get("content-type", "none"))
def test_envelope_encode(vector):
    body = base64.b64decode(vector["body_base64"])
    headers = [tuple(h) for h in vector["headers"]]
    env = build_envelope(headers, body, CONTRACT["defaults"]["stored_headers"])
    assert env == vector["envelope"]
    # what goes to ::jsonb parses back to the same envelope
    assert json.loads(core.envelope_json(env)) == vector["envelope"]


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=lambda v: v["envelope"]["headers"].get("content-type", "none"))
def test_envelope_replay(vector):
    # the database hands back the jsonb's text (key order and spacing are jsonb's, not ours)
    stored = json.dumps(vector["envelope"], ensure_ascii=False, indent=1)
    status, headers, body = replay(vector["status"], stored)
    assert status == vector["status"]
    assert body == base64.b64decode(vector["body_base64"])
    assert dict(headers) == vector["envelope"]["headers"]


@pytest.mark.parametrize("vector", VECTORS["legacy_replay"], ids=lambda v: str(v["content_type"]))
def test_legacy_replay(vector):
    status, headers, body = replay(201, vector["response_body"])
    assert status == 201
    assert body == vector["body"].encode()
    assert dict(headers).get("content-type") == vector["content_type"]


def test_error_body_bytes():
    for name, spec in CONTRACT["errors"].items():
        message = spec["message"] or "tenant must not be NULL"
        status, headers, body = error_response(name, message)
        assert status == spec["status"]
        assert body == ('{"error":"%s","message":"%s"}' % (name, message)).encode()
        assert ("content-type", "application/json") in headers
        assert any(h == "retry-after" for h, _ in headers) is bool(spec.get("retry_after"))


def test_error_body_escapes():
    assert error_body("invalid_request", 'key "x"\n\\ é') == (
        '{"error":"invalid_request","message":"key \\"x\\"\\n\\\\ é"}'.encode()
    )


def test_error_messages_come_from_the_contract():
    assert error_response("key_missing")[2] == error_body(
        "key_missing", CONTRACT["errors"]["key_missing"]["message"])
    assert dict(error_response("unavailable")[1])["retry-after"] == str(
        CONTRACT["defaults"]["retry_after_seconds"])
    assert dict(error_response("in_progress", None, 7)[1])["retry-after"] == "7"


@pytest.mark.parametrize("sqlstate,name", [
    *[(prefix.ljust(5, "0") if len(prefix) < 5 else prefix, name) for prefix, name in CONTRACT["sqlstates"]],
    ("22004", "invalid_request"),
    ("22P02", "invalid_request"),
    ("57P01", "unavailable"),
    ("08006", "unavailable"),
    ("42883", "internal_error"),
    ("23505", "internal_error"),
    (None, "unavailable"),
    ("", "unavailable"),
])
def test_sqlstate_mapping(sqlstate, name):
    assert error_name_for_sqlstate(sqlstate) == name


class FakeDiag:
    message_primary = "key must not be NULL"


class FakePgError(Exception):
    sqlstate = "22004"
    diag = FakeDiag()


def test_invalid_request_carries_the_database_message():
    err = error_for_exception(FakePgError("ERROR: key must not be NULL\nCONTEXT: ..."))
    assert (err.name, err.status, err.message) == ("invalid_request", 400, "key must not be NULL")


def test_wrapped_error_and_lost_connection():
    class Wrapper(Exception):
        pass

    try:
        try:
            raise FakePgError()
        except FakePgError as inner:
            raise Wrapper() from inner  # how Django wraps psycopg's errors
    except Wrapper as exc:
        assert error_for_exception(exc).name == "invalid_request"
    assert error_for_exception(ConnectionError("gone")).name == "unavailable"


def test_claim_statement_is_the_contracts():
    sql = CONTRACT["sql"]
    body_mode = Route("POST", "/payments").sql_claim
    fields_mode = Route("POST", "/payments", fields=["amount"]).sql_claim
    assert "{fingerprint}" not in body_mode
    assert core.statement(sql["fingerprint_body"]) in body_mode
    assert core.statement(sql["fingerprint_fields"]) in fields_mode
    assert "%(p10)s" in fields_mode and "%(p10)s" not in body_mode
    assert "$" not in body_mode.replace("$5::", "")  # every placeholder converted
    assert body_mode.startswith(core.statement(sql["claim"].split("{fingerprint}")[0]))


def test_claim_params_order():
    route = Route("post", "/orders/{id}", ttl="1 day", fields=["a", "b"], statement_timeout_ms=5,
                  idle_in_transaction_timeout_ms=6)
    p = claim_params(route, "t", "k", b"{}")
    assert [p[f"p{i}"] for i in range(1, 11)] == [
        "t", "POST", "/orders/{id}", "k", b"{}", None, "1 day", "5", "6", ["a", "b"]]


def _claim(outcome, **kw):
    values = dict(scoped_key="POST /p k", outcome=outcome, fence=1, attempt=1, response_code=None,
                  response_body=None, checkpoint_phase=None, checkpoint_data=None, retry_after=None)
    values.update(kw)
    return Claim(**values)


def test_outcomes():
    route = Route("POST", "/p")
    assert outcome_response(route, _claim("claimed")) is None
    status, headers, body = outcome_response(route, _claim(
        "completed", response_code=201,
        response_body='{"http": 1, "body": "hi", "headers": {"content-type": "text/plain"}}'))
    assert (status, body) == (201, b"hi")
    assert ("idempotent-replayed", "true") in headers
    assert outcome_response(route, _claim("failed", response_code=402))[:1] == (402,)
    status, headers, _ = outcome_response(route, _claim("in_progress"))
    assert status == 409 and dict(headers)["retry-after"] == "1"
    assert dict(outcome_response(route, _claim("in_progress", retry_after=4))[1])["retry-after"] == "4"
    assert outcome_response(route, _claim("mismatch"))[0] == 422
    assert outcome_response(route, _claim("stale_key"))[2] == error_response("stale_key")[2]
