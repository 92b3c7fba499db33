"""Contract 2 (clients/CONTRACT.md), over real HTTP against every reference app: the request
actually sent is fingerprinted, the tenant is required, stored headers never carry a cookie and
keep every value in order, the handler cannot end the claim's transaction, and every outcome is
counted. The hostile search_path (run.sh, hostile.sql) is on for every test of the suite."""

import http.client
import json

import psycopg
import pytest
from conftest import CONTRACT, SELECTED, idem_schema
from test_http import REPLAY, error_body, fresh, payment_id, payment_rows, post

REF = CONTRACT["reference_app"]
OUTCOMES = CONTRACT["outcomes"]


def outcomes(app):
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=10)
    try:
        conn.request("GET", "/_pg_idem/outcomes")
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200, body
        counts = json.loads(body)
    finally:
        conn.close()
    assert sorted(counts) == sorted(OUTCOMES), counts
    return counts


def counted(app, request):
    """The outcomes one request added (the tests of one app run one at a time)."""
    before = outcomes(app)
    answer = request()
    after = outcomes(app)
    return answer, {name: after[name] - before[name] for name in OUTCOMES if after[name] != before[name]}


def stored_envelope(db, tenant, route, key, target, body):
    """The response_body stored for a completed key, read through idem_claim with the request's
    own fingerprint (a completed key answers with its response and changes nothing)."""
    schema = idem_schema(db)
    # the contract's expression, with the target as $6: the only parameters sent are used
    fingerprint = CONTRACT["sql"]["fingerprint_body"].replace("$10", "$6")
    sql = f"SELECT c.outcome, c.response_body FROM {schema}.idem_claim($1, 'POST ' || $3 || ' ' || $4, {fingerprint}) AS c"
    outcome, envelope = psycopg.RawCursor(db).execute(
        sql, [tenant, "POST", route, key, json.dumps(body).encode(), target]).fetchone()
    assert outcome == "completed", outcome
    return envelope


def order_rows(db, tenant):
    return db.execute("SELECT order_id, amount FROM payments WHERE tenant = %s ORDER BY id", (tenant,)).fetchall()


# --- the request actually sent --------------------------------------------------------------

def test_a_key_reused_on_another_order_is_422_and_pays_nothing(target, db):
    tenant, key = fresh()
    first = post(target, "/orders/7/pay", {"amount": 30}, key, tenant)
    assert first.status == 201, first
    assert first.headers["location"] == f"/payments/{payment_id(db, tenant, key)}"
    other = post(target, "/orders/8/pay", {"amount": 30}, key, tenant)
    assert (other.status, other.body) == (422, error_body("mismatch"))
    assert REPLAY not in other.headers
    # the same order and body replays
    again = post(target, "/orders/7/pay", {"amount": 30}, key, tenant)
    assert (again.stored(), again.headers[REPLAY]) == (first.stored(), "true")
    assert order_rows(db, tenant) == [(7, 30)]


def test_a_key_reused_with_another_query_string_is_422(target, db):
    tenant, key = fresh()
    assert post(target, "/payments?coupon=a", {"amount": 12}, key, tenant).status == 201
    for path in ["/payments?coupon=b", "/payments", "/payments?coupon=a&x=1"]:
        r = post(target, path, {"amount": 12}, key, tenant)
        assert (path, r.status, r.body) == (path, 422, error_body("mismatch"))
    again = post(target, "/payments?coupon=a", {"amount": 12}, key, tenant)
    assert (again.status, again.headers.get(REPLAY)) == (201, "true")
    assert payment_rows(db, tenant) == [(key, 12)]


def test_the_target_is_normalised_before_it_is_fingerprinted(target, db):
    """An escaped unreserved character is the same request (vectors.request_target)."""
    tenant, key = fresh()
    assert post(target, "/payments?note=%7Ea", {"amount": 13}, key, tenant).status == 201
    again = post(target, "/payments?note=~a", {"amount": 13}, key, tenant)
    assert (again.status, again.headers.get(REPLAY)) == (201, "true"), again


# --- the tenant -----------------------------------------------------------------------------

@pytest.mark.parametrize("tenant", [None, ""])
def test_no_tenant_is_400_and_runs_nothing(target, db, tenant):
    _, key = fresh()
    r, added = counted(target, lambda: post(target, "/payments", {"amount": 5}, key, tenant))
    assert (r.status, r.body) == (400, error_body("tenant_missing"))
    assert added == {"rejected": 1}
    assert db.execute("SELECT count(*) FROM payments WHERE idem_key = %s", (key,)).fetchone()[0] == 0


def test_another_tenant_with_the_same_key_and_body_runs_its_own_request(target, db):
    alice, key = fresh()
    bob, _ = fresh()
    first = post(target, "/payments", {"amount": 40}, key, alice)
    theirs = post(target, "/payments", {"amount": 40}, key, bob)
    assert theirs.status == 201 and REPLAY not in theirs.headers, theirs
    assert theirs.body != first.body
    assert payment_rows(db, alice) == [(key, 40)] and payment_rows(db, bob) == [(key, 40)]


# --- only pg_idem's own functions -----------------------------------------------------------

def test_the_search_path_is_hostile_and_the_apps_work_through_it(target, db):
    """The trap is armed: an unqualified call runs mallory's look-alike. The app's requests (this
    suite) succeed, so it never called through the search_path."""
    assert db.execute("SHOW search_path").fetchone()[0].startswith("mallory")
    with pytest.raises(Exception, match="look-alike mallory.idem_version ran"):
        db.execute("SELECT idem_version()")
    tenant, key = fresh()
    assert post(target, "/payments", {"amount": 6}, key, tenant).status == 201
    schema = idem_schema(db)
    assert db.execute(f"SELECT outcome FROM {schema}.idem_claim(%s, %s, 'x')",
                      (tenant, f"POST /payments {key}")).fetchone()[0] in ("completed", "mismatch")


# --- headers --------------------------------------------------------------------------------

def test_a_replay_carries_no_cookie(target, db):
    tenant, key = fresh()
    body = {"amount": 9, "set_cookie": True}
    first = post(target, "/payments", body, key, tenant)
    assert first.status == 201, first
    assert first.field("set-cookie") == REF["cookie"]
    again = post(target, "/payments", body, key, tenant)
    assert again.headers[REPLAY] == "true"
    assert again.field("set-cookie") is None, again
    assert again.stored() == first.stored()


def test_every_value_of_a_multi_valued_header_replays_in_order_from_every_app(target, running_apps, db):
    tenant, key = fresh()
    body = {"amount": 14, "links": True}
    first = post(target, "/payments", body, key, tenant)
    assert first.status == 201, first
    links = ", ".join(REF["links"])
    assert first.field("link") == links
    for name in SELECTED:
        again = post(running_apps(name, target.mode), "/payments", body, key, tenant)
        assert (name, again.headers.get(REPLAY), again.field("link")) == (name, "true", links)
    stored = stored_envelope(db, tenant, "/payments", key, "/payments", body)
    # one stored value per line sent; a framework that joins them sends (and stores) one line
    assert stored["http"] == 2 and stored["headers"]["link"] in (REF["links"], [links]), stored


# --- the handler cannot end the claim's transaction -----------------------------------------

def test_a_handler_that_commits_through_the_api_is_refused_and_rolled_back(target, db):
    tenant, key = fresh()
    body = {"amount": 15, "commit": "api"}
    r, added = counted(target, lambda: post(target, "/payments", body, key, tenant))
    assert r.status == 500 and REPLAY not in r.headers, r
    assert added.get("claimed") == 1 and "stored" not in added, added
    assert payment_rows(db, tenant) == []
    # nothing was stored and the claim rolled back: the key is free
    retry = post(target, "/payments", {"amount": 15}, key, tenant)
    assert retry.status == 201 and REPLAY not in retry.headers, retry
    assert payment_rows(db, tenant) == [(key, 15)]


def test_a_handler_that_commits_through_sql_is_detected_and_nothing_is_stored(target, db):
    tenant, key = fresh()
    body = {"amount": 16, "commit": "sql"}
    r, added = counted(target, lambda: post(target, "/payments", body, key, tenant))
    assert (r.status, r.body) == (500, error_body("internal_error")), r
    assert added == {"claimed": 1, "transaction_ended": 1}, added
    # the COMMIT made the insert and the claim durable: the key stays in progress, so the
    # handler never runs twice
    assert payment_rows(db, tenant) == [(key, 16)]
    retry = post(target, "/payments", body, key, tenant)
    assert (retry.status, retry.body) == (409, error_body("in_progress"))
    assert payment_rows(db, tenant) == [(key, 16)]


# --- outcomes -------------------------------------------------------------------------------

def test_every_outcome_is_counted(target, db):
    tenant, key = fresh()
    body = {"amount": 17}
    _, added = counted(target, lambda: post(target, "/payments", body, key, tenant))
    assert added == {"claimed": 1, "stored": 1}
    _, added = counted(target, lambda: post(target, "/payments", body, key, tenant))
    assert added == {"replayed": 1}
    _, added = counted(target, lambda: post(target, "/payments", {"amount": 18}, key, tenant))
    assert added == {"mismatch": 1}
    _, added = counted(target, lambda: post(target, "/payments", body, None, tenant))
    assert added == {"rejected": 1}
    _, added = counted(target, lambda: post(target, "/payments", {"amount": 1, "fail": "transient"}, fresh()[1], tenant))
    assert added == {"claimed": 1, "rolled_back": 1}
    # the database refuses a tenant longer than pg_idem.max_key_length (255)
    r, added = counted(target, lambda: post(target, "/payments", body, key, "t" * 300))
    assert r.status == 400 and r.json()["error"] == "invalid_request", r
    assert added == {"database_error": 1}
