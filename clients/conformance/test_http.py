"""The HTTP contract (clients/CONTRACT.md), checked against every reference app over real HTTP.

Each test uses a tenant of its own, so the apps of one mode share their database's tables."""

import http.client
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import CONTRACT, SELECTED, App, idem_schema

DEFAULTS = CONTRACT["defaults"]
REF = CONTRACT["reference_app"]
REPLAY = DEFAULTS["replay_header"].lower()
STORED = DEFAULTS["stored_headers"]


class Response:
    def __init__(self, status, headers, body):
        self.status, self.body = status, body
        self.header_lines = [(name.lower(), value) for name, value in headers]
        self.headers = {}
        for name, value in headers:
            self.headers.setdefault(name.lower(), value)

    def json(self):
        return json.loads(self.body)

    def field(self, name):
        """A header's field value as RFC 9110 combines its lines: the values in order, joined
        by ", " (a framework may send them as one line or as several), or None."""
        values = [v for n, v in self.header_lines if n == name]
        return ", ".join(values) if values else None

    def stored(self):
        """What a replay must repeat: status, the allow-listed headers, the body's bytes."""
        return self.status, {h: self.headers.get(h) for h in STORED}, self.body

    def __repr__(self):
        return f"<{self.status} {self.headers} {self.body[:200]!r}>"


def post(app, path, body, key=None, tenant=None, raw_key=None, timeout=30):
    headers = {"Content-Type": "application/json"}
    if tenant is not None:
        headers["X-Tenant"] = tenant
    if raw_key is not None:
        headers[DEFAULTS["key_header"]] = raw_key
    elif key is not None:
        headers[DEFAULTS["key_header"]] = key
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=timeout)
    try:
        conn.request("POST", path, body=data, headers=headers)
        r = conn.getresponse()
        return Response(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def error_body(name, message=None):
    message = CONTRACT["errors"][name]["message"] if message is None else message
    return json.dumps({"error": name, "message": message}, separators=(",", ":"), ensure_ascii=False).encode()


def fresh():
    return f"t-{uuid.uuid4().hex[:12]}", str(uuid.uuid4())


def payment_rows(db, tenant):
    return db.execute("SELECT idem_key, amount FROM payments WHERE tenant = %s ORDER BY id", (tenant,)).fetchall()


def payout_rows(db, tenant):
    return db.execute("SELECT idem_key, amount, attempt FROM payouts WHERE tenant = %s ORDER BY id", (tenant,)).fetchall()


def payment_id(db, tenant, key):
    return db.execute("SELECT id FROM payments WHERE tenant = %s AND idem_key = %s", (tenant, key)).fetchone()[0]


def swallow(fn, *args):
    """Runs a request whose connection is expected to break (its server is killed)."""
    try:
        fn(*args)
    except OSError:
        pass


def retry_until_settled(app, path, body, key, tenant, seconds=10):
    """A client's retry loop: 409 means wait Retry-After (the contract says it is there) and retry."""
    deadline = time.monotonic() + seconds
    while True:
        r = post(app, path, body, key, tenant)
        if r.status != 409 or time.monotonic() > deadline:
            return r
        time.sleep(min(float(r.headers["retry-after"]), 0.5))


def test_a_missing_key_is_400_and_nothing_runs(target, db):
    tenant, _ = fresh()
    r = post(target, "/payments", {"amount": 5}, tenant=tenant)
    assert (r.status, r.body) == (400, error_body("key_missing"))
    assert r.headers["content-type"].startswith("application/json")
    assert payment_rows(db, tenant) == []


@pytest.mark.parametrize("raw", ['"abc', "with space", "k" * (CONTRACT["defaults"]["max_key_length"] + 1)])
def test_a_malformed_key_is_400(target, db, raw):
    tenant, _ = fresh()
    r = post(target, "/payments", {"amount": 5}, tenant=tenant, raw_key=raw)
    assert (r.status, r.body) == (400, error_body("key_invalid"))
    assert payment_rows(db, tenant) == []


def test_a_body_over_the_limit_is_413_and_nothing_runs(target, db):
    tenant, key = fresh()
    limit = DEFAULTS["max_body_bytes"]
    body = b'{"amount":1,"pad":"' + b"x" * limit + b'"}'
    r = post(target, "/payments", body, key, tenant)
    assert (r.status, r.body) == (413, error_body("payload_too_large"))
    assert payment_rows(db, tenant) == []
    # the key was never claimed: a request within the limit runs
    assert post(target, "/payments", {"amount": 1}, key, tenant).status == 201


def test_a_json_response_replays_byte_for_byte(target, db):
    tenant, key = fresh()
    first = post(target, "/payments", {"amount": 1250}, key, tenant)
    assert first.status == 201, first
    pid = payment_id(db, tenant, key)
    assert first.body == REF["payment_json"].replace("{id}", str(pid)).replace("{amount}", "1250").encode()
    assert first.headers["location"] == f"/payments/{pid}"
    assert first.headers["content-type"].startswith("application/json")
    assert REPLAY not in first.headers
    again = post(target, "/payments", {"amount": 1250}, key, tenant)
    assert again.stored() == first.stored()
    assert again.headers[REPLAY] == DEFAULTS["replay_header_value"]
    # the large integer and the decimal's trailing zero are the stored bytes, not a re-parse
    assert b"9007199254740993" in again.body and b"12.50" in again.body
    assert payment_rows(db, tenant) == [(key, 1250)]


def test_a_text_response_replays_byte_for_byte(target, db):
    tenant, key = fresh()
    body = {"amount": 99, "format": "text"}
    first = post(target, "/payments", body, key, tenant)
    assert first.status == 201, first
    pid = payment_id(db, tenant, key)
    assert first.body == REF["payment_text"].replace("{id}", str(pid)).replace("{amount}", "99").encode()
    assert first.headers["content-type"].lower().replace(" ", "") == "text/plain;charset=utf-8"
    again = post(target, "/payments", body, key, tenant)
    assert (again.stored(), again.headers[REPLAY]) == (first.stored(), "true")


def test_a_key_written_by_one_app_replays_identically_from_another(target, running_apps, db):
    others = [name for name in SELECTED if name != target.name]
    if not others:
        pytest.skip("only one app selected")
    tenant, key = fresh()
    first = post(target, "/payments", {"amount": 42, "format": "text"}, key, tenant)
    assert first.status == 201, first
    for name in others:
        other = running_apps(name, target.mode)
        again = post(other, "/payments", {"amount": 42, "format": "text"}, key, tenant)
        assert (name, again.stored(), again.headers.get(REPLAY)) == (name, first.stored(), "true")
    assert len(payment_rows(db, tenant)) == 1


def test_twenty_concurrent_duplicates_have_one_effect(target, db):
    tenant, key = fresh()
    body = {"amount": 700, "sleep_ms": 600}
    barrier = threading.Barrier(20)

    def one(_):
        barrier.wait()
        return post(target, "/payments", body, key, tenant)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    fresh_ones = [r for r in answers if r.status == 201 and REPLAY not in r.headers]
    assert len(fresh_ones) == 1, answers
    for r in answers:
        if r.status == 409:
            assert r.body == error_body("in_progress")
            assert int(r.headers["retry-after"]) >= 1
        else:
            assert r.stored() == fresh_ones[0].stored(), r
    assert payment_rows(db, tenant) == [(key, 700)]
    assert post(target, "/payments", body, key, tenant).stored() == fresh_ones[0].stored()


def test_a_key_reused_for_another_request_is_422(target, db):
    tenant, key = fresh()
    assert post(target, "/payments", {"amount": 10}, key, tenant).status == 201
    r = post(target, "/payments", {"amount": 11}, key, tenant)
    assert (r.status, r.body) == (422, error_body("mismatch"))
    assert payment_rows(db, tenant) == [(key, 10)]


def test_the_quoted_and_the_bare_key_are_one_key(target, db):
    tenant, key = fresh()
    first = post(target, "/payments", {"amount": 3}, tenant=tenant, raw_key=f'"{key}"')
    assert first.status == 201, first
    again = post(target, "/payments", {"amount": 3}, tenant=tenant, raw_key=key)
    assert (again.stored(), again.headers[REPLAY]) == (first.stored(), "true")
    assert payment_rows(db, tenant) == [(key, 3)]


def test_a_final_failure_is_replayed(target, db):
    tenant, key = fresh()
    body = {"amount": 5000, "fail": "final"}
    first = post(target, "/payments", body, key, tenant)
    assert (first.status, first.body) == (402, REF["declined_json"].replace("{amount}", "5000").encode())
    again = post(target, "/payments", body, key, tenant)
    assert (again.stored(), again.headers[REPLAY]) == (first.stored(), "true")
    assert payment_rows(db, tenant) == []


def test_a_transient_failure_rolls_back_and_the_retry_runs_again(target, db):
    tenant, key = fresh()
    body = {"amount": 77, "fail": "transient"}
    first = post(target, "/payments", body, key, tenant)
    assert first.status >= 500 and REPLAY not in first.headers, first
    assert payment_rows(db, tenant) == []
    second = post(target, "/payments", body, key, tenant)
    assert second.status == 201 and REPLAY not in second.headers, second
    assert payment_rows(db, tenant) == [(key, 77)]


def test_a_service_killed_while_it_holds_a_claim_leaves_the_retry_to_run_once(target, db):
    victim = App(target.name, target.mode).start()
    tenant, key = fresh()
    body = {"amount": 31, "sleep_ms": 20000}
    hung = threading.Thread(target=swallow, args=(post, victim, "/payments", body, key, tenant))
    try:
        hung.start()
        time.sleep(1.0)
        # the victim holds the claim (a request that found the key free would claim it and hang)
        held = post(target, "/payments", body, key, tenant, timeout=5)
        assert (held.status, held.body) == (409, error_body("in_progress"))
    finally:
        victim.kill()
    hung.join()
    r = retry_until_settled(target, "/payments", {"amount": 31}, key, tenant)
    assert r.status == 201 and REPLAY not in r.headers, r
    assert payment_rows(db, tenant) == [(key, 31)]


def test_a_hung_handler_lets_go_of_its_key_after_the_idle_timeout(target, db):
    tenant, key = fresh()
    hung_answer = []
    hung = threading.Thread(target=lambda: hung_answer.append(
        post(target, "/payments", {"amount": 8, "sleep_ms": REF["idle_in_transaction_timeout_ms"] + 2500}, key, tenant)))
    hung.start()
    time.sleep(0.4)
    blocked = post(target, "/payments", {"amount": 8}, key, tenant)
    assert (blocked.status, blocked.body) == (409, error_body("in_progress"))
    # no lease applies to an uncommitted claim: the server's idle-in-transaction timeout ends it
    r = retry_until_settled(target, "/payments", {"amount": 8}, key, tenant)
    assert r.status == 201 and REPLAY not in r.headers, r
    hung.join()
    assert hung_answer[0].status >= 500 and REPLAY not in hung_answer[0].headers, hung_answer[0]
    assert payment_rows(db, tenant) == [(key, 8)]


def test_a_heartbeat_without_a_lease_extends_by_the_routes(target, db):
    # the route's lease is 1 s; the database's default (pg_idem.lease_timeout) is a minute: a
    # package that sent NULL would move the holder's Retry-After to a minute away
    tenant, key = fresh()
    body = {"amount": 251, "heartbeat": True, "sleep_ms": 1500}
    first_answer = []
    first = threading.Thread(target=lambda: first_answer.append(post(target, "/payouts", body, key, tenant)))
    first.start()
    time.sleep(0.5)
    busy = post(target, "/payouts", body, key, tenant)
    first.join()
    assert (busy.status, busy.body) == (409, error_body("in_progress"))
    assert int(busy.headers["retry-after"]) == 1, busy.headers["retry-after"]
    assert first_answer[0].status == 201, first_answer[0]


def test_lease_mode_takeover_fences_the_stale_attempt(target, db):
    tenant, key = fresh()
    body = {"amount": 250, "sleep_ms": 2500}
    first_answer = []
    first = threading.Thread(target=lambda: first_answer.append(post(target, "/payouts", body, key, tenant)))
    first.start()
    time.sleep(0.3)
    # a committed claim with a lease: in_progress tells the truth about when to come back
    busy = post(target, "/payouts", body, key, tenant)
    assert (busy.status, busy.body) == (409, error_body("in_progress"))
    assert int(busy.headers["retry-after"]) == 1  # the lease is 1 s
    time.sleep(1.2)  # the first attempt's 1 s lease has expired; it is still "calling the bank"
    second = post(target, "/payouts", body, key, tenant)
    first.join()
    assert (first_answer[0].status, first_answer[0].body) == (409, error_body("lease_lost")), first_answer[0]
    assert second.status == 201, second
    rows = payout_rows(db, tenant)
    assert rows == [(key, 250, 2)]
    reply = second.json()
    assert reply["attempt"] == 2
    # every attempt sends the external call the same downstream key
    assert reply["bank_ref"] == db.execute(f"SELECT {idem_schema(db)}.idem_downstream_key(%s, %s, 'bank')::text",
                                           (tenant, f"POST /payouts {key}")).fetchone()[0]
    again = post(target, "/payouts", body, key, tenant)
    assert (again.stored(), again.headers[REPLAY]) == (second.stored(), "true")
