"""POST /payments with exactly-once effects, using pg_idem in the payment's own transaction.

    python server.py [PORT]     (0 or nothing: any free port; the chosen one is printed)

Connects with the usual libpq variables (PGHOST, PGPORT, PGUSER, PGDATABASE, ...).

Request:  POST /payments  {"amount": 1250, "currency": "EUR"}   (amount in minor units)
Headers:  Idempotency-Key (required), X-Tenant (the account; here simply trusted)
Test knobs in the body: "sleep": seconds to hold the transaction open,
"fail_once": true to fail the first attempt of a key after its INSERT.
"""

import json
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

AMOUNT_LIMIT = 1_000_000  # above it a payment is declined: a final error, replayed like a success
MAX_BODY_BYTES = 64 * 1024

# prepare_threshold=None: no server-side prepared statements, so that it also works behind a
# transaction pooler (PgBouncer before 1.21; examples/run.sh --pooler)
pool = ConnectionPool(
    "", min_size=1, max_size=10, open=False, kwargs={"prepare_threshold": None}
)

# keys whose injected failure has happened; lives in memory like a flaky downstream service would
failed_keys = set()
failed_keys_lock = threading.Lock()


class TransientError(Exception):
    pass


class BadRequest(Exception):
    pass


def encode(body):
    # jsonb keeps neither key order nor whitespace, so a fresh response and its replay are
    # serialised the same way, and the replay is byte-identical
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def reject_constant(name):
    # Python accepts NaN and Infinity, jsonb does not
    raise ValueError(f"{name} is not JSON")


def parse(raw):
    """Returns the body as text and as a validated dict."""
    try:
        text = raw.decode()
        req = json.loads(text, parse_constant=reject_constant)
    except ValueError:
        raise BadRequest("body is not UTF-8 JSON") from None
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object")
    amount, currency = req.get("amount"), req.get("currency")
    if type(amount) is not int or amount <= 0:
        raise BadRequest("amount must be a positive integer (minor units)")
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isupper()):
        raise BadRequest("currency must be a three-letter code such as EUR")
    sleep = req.get("sleep", 0)
    if type(sleep) not in (int, float) or not 0 <= sleep <= 5:
        raise BadRequest("sleep must be between 0 and 5 seconds")
    return text, req


def inject_failure(tenant, key):
    with failed_keys_lock:
        if (tenant, key) in failed_keys:
            return False
        failed_keys.add((tenant, key))
        return True


def create_payment(tenant, key, text, req):
    """Returns (status, body, extra headers). Everything happens in one transaction."""
    # the pool's block commits when it ends normally and rolls back on an exception: a claim
    # that is rolled back vanishes, so the client's retry is claimed afresh
    with pool.connection() as conn:
        # the hash is computed from the raw body, so key order, whitespace and number spelling
        # of a retry do not matter
        outcome, fence, code, body = conn.execute(
            "SELECT outcome, fence, response_code, response_body"
            " FROM idem_claim(%s, %s, idem_request_hash('POST', '/payments', %s::jsonb))",
            (tenant, key, text),
        ).fetchone()

        if outcome in ("completed", "failed"):
            return code, body, {"Idempotent-Replayed": "true"}
        if outcome == "in_progress":
            return 409, {"error": "a request with this key is in progress"}, {"Retry-After": "1"}
        if outcome == "mismatch":
            return 422, {"error": "this key was used with a different request"}, {}
        if outcome != "claimed":  # stale_key, with pg_idem.reject_stale_uuidv7 on
            return 422, {"error": f"key refused: {outcome}"}, {}

        time.sleep(req.get("sleep", 0))

        if req["amount"] > AMOUNT_LIMIT:
            body = {"error": "amount_over_limit", "limit": AMOUNT_LIMIT}
            conn.execute(
                "SELECT idem_fail_final(%s, %s, %s, 402, %s)", (tenant, key, fence, Jsonb(body))
            )
            return 402, body, {}

        (payment_id,) = conn.execute(
            "INSERT INTO payments (tenant, idem_key, amount, currency)"
            " VALUES (%s, %s, %s, %s) RETURNING id",
            (tenant, key, req["amount"], req["currency"]),
        ).fetchone()

        if req.get("fail_once") and inject_failure(tenant, key):
            raise TransientError("downstream timed out")

        body = {"payment_id": payment_id, "amount": req["amount"], "currency": req["currency"]}
        # nobody can take the key over before this transaction commits; should idem_complete
        # refuse all the same (55000), the exception rolls the payment back with it
        conn.execute(
            "SELECT idem_complete(%s, %s, %s, 201, %s)", (tenant, key, fence, Jsonb(body))
        )
        return 201, body, {}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/payments":
            return self.reply(404, {"error": "not found"})
        key = self.headers.get("Idempotency-Key")
        tenant = self.headers.get("X-Tenant")
        if not key:
            return self.reply(400, {"error": "Idempotency-Key header required"})
        if not tenant:
            return self.reply(400, {"error": "X-Tenant header required"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self.reply(413, {"error": "body too large"})
        try:
            self.reply(*create_payment(tenant, key, *parse(self.rfile.read(length))))
        except BadRequest as e:
            self.reply(400, {"error": str(e)})
        except TransientError as e:
            self.reply(503, {"error": str(e)}, {"Retry-After": "1"})
        except psycopg.errors.ObjectNotInPrerequisiteState:
            self.reply(409, {"error": "lost the key to another attempt"}, {"Retry-After": "1"})
        except psycopg.DataError as e:
            # class 22, data exception: a key or tenant too long, a body jsonb refuses, ...
            self.reply(400, {"error": e.diag.message_primary})
        except Exception:
            traceback.print_exc()
            self.reply(500, {"error": "internal error"})

    def reply(self, status, body, headers=None):
        data = encode(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    pool.open(wait=True, timeout=10)
    with pool.connection() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS payments ("
            " id bigserial PRIMARY KEY, tenant text NOT NULL, idem_key text NOT NULL,"
            " amount numeric NOT NULL, currency text NOT NULL)"
        )
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    finally:
        pool.close()


if __name__ == "__main__":
    main()
