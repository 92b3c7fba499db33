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
    split_target,
)

PACKAGE_COPY = pathlib.Path(str(resources.files("pg_idem_http").joinpath("contract.json")))
SOURCE = pathlib.Path(__file__).resolve().parents[2] / "contract.json"  # clients/contract.json
VECTORS = CONTRACT["vectors"]


def test_copy_is_the_source():
    if not SOURCE.exists():
        pytest.skip("not in the repository: no clients/contract.json to compare with")
    assert PACKAGE_COPY.read_bytes() == SOURCE.read_bytes(), (
        "src/pg_idem_http/contract.json differs from clients/contract.json:"
        " run clients/sync-contract.sh"
    )


def test_contract_loaded_from_the_copy():
    assert CONTRACT == json.loads(PACKAGE_COPY.read_text("utf-8"))
    assert CONTRACT["contract_version"] == 2


@pytest.mark.parametrize("vector", VECTORS["key_header"], ids=lambda v: repr(v["header"])[:40])
def test_key_header(vector):
    assert parse_key(vector["header"]) == vector["key"]


def test_missing_key_header_is_none():
    assert parse_key(None) is None


@pytest.mark.parametrize("vector", VECTORS["final_status"], ids=lambda v: str(v["status"]))
def test_final_status(vector):
    assert is_final(vector["status"]) is vector["final"]


def _envelope_id(v):
    return ",".join(v["envelope"]["headers"]) or "none"


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=_envelope_id)
def test_envelope_encode(vector):
    body = base64.b64decode(vector["body_base64"])
    headers = [tuple(h) for h in vector["headers"]]
    stored = vector.get("stored_headers", CONTRACT["defaults"]["stored_headers"])
    env = build_envelope(headers, body, stored)
    assert env == vector["envelope"]
    # the values of one name keep the response's order (dict equality ignores only names' order)
    for name, values in vector["envelope"]["headers"].items():
        assert env["headers"][name] == values
    # what goes to ::jsonb parses back to the same envelope
    assert json.loads(core.envelope_json(env)) == vector["envelope"]


@pytest.mark.parametrize("vector", VECTORS["envelope"], ids=_envelope_id)
def test_envelope_replay(vector):
    # the database hands back the jsonb's text (key order and spacing are jsonb's, not ours)
    stored = json.dumps(vector["envelope"], ensure_ascii=False, indent=1)
    status, headers, body = replay(vector["status"], stored)
    assert status == vector["status"]
    assert body == base64.b64decode(vector["body_base64"])
    expected = [(n, v) for n, values in vector["envelope"]["headers"].items() for v in values]
    assert headers == expected


@pytest.mark.parametrize("vector", VECTORS["replay"], ids=lambda v: v["about"])
def test_replay_vectors(vector):
    status, headers, body = replay(vector["response_code"], vector["response_body"])
    assert status == vector["response_code"]
    assert body == base64.b64decode(vector["body_base64"])
    # names in jsonb's order may differ; each name's values in order
    assert sorted(headers, key=lambda h: h[0]) == sorted(
        [tuple(h) for h in vector["headers"]], key=lambda h: h[0])
    for name in {n for n, _ in headers}:
        assert [v for n, v in headers if n == name] == [
            v for n, v in vector["headers"] if n == name]


@pytest.mark.parametrize("version", [0, 3, "2", True, None])
def test_an_envelope_of_another_version_is_an_internal_error(version):
    stored = json.dumps({"http": version, "headers": {}, "body": "x"})
    with pytest.raises(core.BadEnvelope):
        replay(200, stored)
    response = outcome_response(Route("POST", "/p"), _claim(
        "completed", response_code=200, response_body=stored))
    assert response == error_response("internal_error")


@pytest.mark.parametrize("vector", VECTORS["request_target"], ids=lambda v: v["received"])
def test_request_target(vector):
    assert split_target(vector["received"]) == vector["target"]
    assert split_target(vector["received"].encode("utf-8")) == vector["target"]


@pytest.mark.parametrize("vector", VECTORS["version"], ids=lambda v: v["installed"])
def test_version(vector):
    assert core.version_ok(vector["installed"]) is vector["ok"]
    if vector["ok"]:
        assert core.checked_version(vector["installed"]) == vector["installed"]
    else:
        with pytest.raises(core.SetupError) as err:
            core.checked_version(vector["installed"])
        # the error names both versions
        assert vector["installed"] in str(err.value)
        assert CONTRACT["min_pg_idem_version"] in str(err.value)


def test_locate_refuses_no_row_and_foreign_functions():
    with pytest.raises(core.SetupError, match="not installed"):
        core.located_schema(None)
    with pytest.raises(core.SetupError, match=r"public\.idem_claim\(text\)"):
        core.located_schema(("public", "public.idem_claim(text)"))
    assert core.located_schema(('"My Schema"', None)) == '"My Schema"'


@pytest.mark.parametrize("name,quoted", [
    ("public", "public"), ("_x1", "_x1"), ("My", '"My"'), ("a b", '"a b"'), ('a"b', '"a""b"'),
    ("1a", '"1a"'), ("é", '"é"'),
])
def test_quote_ident(name, quoted):
    assert core.quote_ident(name) == quoted


@pytest.mark.parametrize("name", CONTRACT["defaults"]["never_stored_headers"])
def test_a_never_stored_header_is_refused_at_configuration(name):
    with pytest.raises(ValueError, match=name):
        Route("POST", "/p", stored_headers=["content-type", name.upper()])
    with pytest.raises(ValueError, match=name):
        build_envelope([], b"", ["content-type", name])


def test_tenant_configuration():
    with pytest.raises(ValueError, match="single_tenant"):
        core.tenant_hook(None, None)
    with pytest.raises(ValueError, match="not both"):
        core.tenant_hook(lambda r: "a", "b")
    with pytest.raises(ValueError):
        core.tenant_hook(None, "")
    assert core.tenant_hook(None, "acme")(object()) == "acme"


@pytest.mark.parametrize("value", [None, ""])
def test_a_hook_that_names_no_tenant_is_tenant_missing(value):
    with pytest.raises(core.Reject) as err:
        core.tenant_or_reject(value)
    assert err.value.response() == error_response("tenant_missing")


def test_statements_name_the_schema_and_never_search_path():
    statements = core.Statements('"idem schema"')
    for name in ("claim_body", "claim_fields", "complete", "fail_final", "release",
                 "assert_fence", "heartbeat", "checkpoint", "downstream_key", "version"):
        text = getattr(statements, name)
        assert "{schema}" not in text and "{fingerprint}" not in text
        assert '"idem schema".idem_' in text
        assert " idem_" not in text.replace('"idem schema".idem_', "")


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
    *[(prefix.ljust(5, "0"), name) for prefix, name in CONTRACT["sqlstates"]],
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
    statements = core.Statements("public")
    body_mode = statements.claim(Route("POST", "/payments"))
    fields_mode = statements.claim(Route("POST", "/payments", fields=["amount"]))
    assert "{fingerprint}" not in body_mode
    assert core.statement(sql["fingerprint_body"], "public") in body_mode
    assert core.statement(sql["fingerprint_fields"], "public") in fields_mode
    assert "%(p11)s" in fields_mode and "%(p11)s" not in body_mode
    assert "%(p10)s" in fields_mode and "%(p10)s" in body_mode
    assert "$" not in body_mode.replace("$5::", "")  # every placeholder converted
    assert body_mode.startswith(core.statement(sql["claim"].split("{fingerprint}")[0], "public"))


def test_claim_params_order():
    route = Route("post", "/orders/{id}", ttl="1 day", fields=["a", "b"], statement_timeout_ms=5,
                  idle_in_transaction_timeout_ms=6)
    p = claim_params(route, "t", "k", b"{}", "/orders/7?x=1")
    assert [p[f"p{i}"] for i in range(1, 12)] == [
        "t", "POST", "/orders/{id}", "k", b"{}", None, "1 day", "5", "6", "/orders/7?x=1",
        ["a", "b"]]


def test_completion_carries_the_claims_txid():
    claim = _claim("claimed", txid=42)
    p = core.completion_params("t", claim, 201, "{}")
    assert [p[f"p{i}"] for i in range(1, 7)] == ["t", "POST /p k", 1, 201, "{}", 42]
    assert "%(p6)s" in core.Statements("public").complete


def _claim(outcome, **kw):
    values = dict(scoped_key="POST /p k", outcome=outcome, fence=1, attempt=1, response_code=None,
                  response_body=None, checkpoint_phase=None, checkpoint_data=None, retry_after=None,
                  txid=None)
    values.update(kw)
    return Claim(**values)


def test_outcomes():
    route = Route("POST", "/p")
    assert outcome_response(route, _claim("claimed")) is None
    status, headers, body = outcome_response(route, _claim(
        "completed", response_code=201,
        response_body='{"http": 2, "body": "hi", "headers": {"content-type": ["text/plain"]}}'))
    assert (status, body) == (201, b"hi")
    assert ("idempotent-replayed", "true") in headers
    assert outcome_response(route, _claim("failed", response_code=402))[:1] == (402,)
    status, headers, _ = outcome_response(route, _claim("in_progress"))
    assert status == 409 and dict(headers)["retry-after"] == "1"
    in_progress = outcome_response(route, _claim("in_progress", retry_after=4))
    assert dict(in_progress[1])["retry-after"] == "4"
    assert outcome_response(route, _claim("mismatch"))[0] == 422
    assert outcome_response(route, _claim("stale_key"))[2] == error_response("stale_key")[2]
