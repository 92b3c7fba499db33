"""Drives server.py the way a client with retries would, and checks what each key did.

    python drive.py http://127.0.0.1:PORT

Reads the database (for the final check) through the libpq variables, like the server.
Prints one line per check and ends with "N passed, N failed"; exits 1 if any failed.
"""

import json
import sys
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg

URL = sys.argv[1].rstrip("/") + "/payments"
RUN = uuid.uuid4().hex[:8]  # keeps this run's tenants apart from earlier runs in the same database
ACME, GLOBEX = f"acme-{RUN}", f"globex-{RUN}"
results = []


def post(key, body, tenant=ACME, raw=None):
    """Returns (status, headers, body bytes)."""
    headers = {"Content-Type": "application/json", "X-Tenant": tenant}
    if key is not None:
        headers["Idempotency-Key"] = key
    data = (raw if raw is not None else json.dumps(body)).encode()
    request = urllib.request.Request(URL, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))


def replayed(headers):
    return headers.get("Idempotent-Replayed") == "true"


def new_key():
    return str(uuid.uuid4())


expected_rows = {}  # (tenant, key) -> payments rows it must have produced


# A first request runs the handler; its duplicates replay the stored response byte for byte.
key = new_key()
payment = {"amount": 1250, "currency": "EUR"}
status, headers, first = post(key, payment)
check("first request creates the payment", status == 201 and not replayed(headers),
      f"{status} {first!r}")
check("response has payment_id, amount, currency",
      set(json.loads(first)) == {"payment_id", "amount", "currency"}, first)
for i in (1, 2):
    status, headers, again = post(key, payment)
    check(f"duplicate {i} replays the same bytes",
          status == 201 and replayed(headers) and again == first, f"{status} {again!r}")
status, headers, again = post(key, None, raw='{ "currency":"EUR",\n  "amount": 1250 }')
check("same request spelled differently replays",
      status == 201 and replayed(headers) and again == first, f"{status} {again!r}")
expected_rows[ACME, key] = 1

# Duplicates that arrive while the first attempt's transaction is open are told to retry.
key = new_key()
slow = {"amount": 500, "currency": "USD", "sleep": 1.0}
with ThreadPoolExecutor(4) as pool:
    answers = list(pool.map(lambda _: post(key, slow), range(4)))
created = [body for status, headers, body in answers if status == 201 and not replayed(headers)]
conflicts = [headers for status, headers, body in answers if status == 409]
check("concurrent duplicates: exactly one runs", len(created) == 1,
      [(s, b) for s, h, b in answers])
check("concurrent duplicates: the others get 409 with Retry-After",
      len(conflicts) == 3 and all(h.get("Retry-After") for h in conflicts),
      [(s, b) for s, h, b in answers])
status, headers, again = post(key, slow)
check("retry after the slow request replays it",
      status == 201 and replayed(headers) and created and again == created[0],
      f"{status} {again!r}")
expected_rows[ACME, key] = 1

# A key is bound to its request: reusing it for another one is refused.
key = new_key()
post(key, {"amount": 100, "currency": "EUR"})
status, _, body = post(key, {"amount": 999, "currency": "EUR"})
check("same key, different body: 422", status == 422, f"{status} {body!r}")
expected_rows[ACME, key] = 1

# A transient failure rolls the claim back with the payment: the retry runs once more.
key = new_key()
flaky = {"amount": 700, "currency": "GBP", "fail_once": True}
status, headers, body = post(key, flaky)
check("transient failure: 503 with Retry-After",
      status == 503 and headers.get("Retry-After"), f"{status} {body!r}")
status, headers, first = post(key, flaky)
check("retry after the failure runs the payment", status == 201 and not replayed(headers),
      f"{status} {first!r}")
status, headers, again = post(key, flaky)
check("and is replayed afterwards", status == 201 and replayed(headers) and again == first,
      f"{status} {again!r}")
expected_rows[ACME, key] = 1

# A final error is stored like a success and replayed, without running the handler again.
key = new_key()
status, headers, first = post(key, {"amount": 5_000_000, "currency": "EUR"})
check("declined payment: 402", status == 402 and not replayed(headers), f"{status} {first!r}")
status, headers, again = post(key, {"amount": 5_000_000, "currency": "EUR"})
check("declined payment is replayed", status == 402 and replayed(headers) and again == first,
      f"{status} {again!r}")
expected_rows[ACME, key] = 0

# Keys belong to a tenant: the same key in two tenants is two requests.
key = new_key()
status_a, headers_a, body_a = post(key, payment, tenant=ACME)
status_b, headers_b, body_b = post(key, payment, tenant=GLOBEX)
check("same key in two tenants: both run",
      status_a == status_b == 201 and not replayed(headers_a) and not replayed(headers_b)
      and json.loads(body_a)["payment_id"] != json.loads(body_b)["payment_id"],
      f"{status_a} {body_a!r} / {status_b} {body_b!r}")
expected_rows[ACME, key] = expected_rows[GLOBEX, key] = 1

status, _, body = post(None, payment)
check("missing Idempotency-Key: 400", status == 400, f"{status} {body!r}")

# Whatever the client saw, each key must have produced its payments exactly once.
with psycopg.connect("", prepare_threshold=None) as conn:
    rows = conn.execute(
        "SELECT tenant, idem_key, count(*) FROM payments WHERE tenant IN (%s, %s)"
        " GROUP BY tenant, idem_key", (ACME, GLOBEX)).fetchall()
actual = {(tenant, key): count for tenant, key, count in rows}
wrong = {k: (n, actual.get(k, 0)) for k, n in expected_rows.items() if actual.get(k, 0) != n}
extra = set(actual) - set(expected_rows)
check("database: one payment per key, none for the declined one", not wrong and not extra,
      f"expected/actual {wrong}, unexpected {extra}")

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
