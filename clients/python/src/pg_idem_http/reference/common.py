"""What both reference apps share: argument parsing, body validation, the body templates."""

from __future__ import annotations

import argparse
import json
import threading
from typing import Any

from ..core import CONTRACT, Route

APP = CONTRACT["reference_app"]

# CONTRACT.md "The reference apps": the statements each app runs in one transaction before it
# listens (a lock, then the tables, named with their schema in every statement)
TABLES = tuple(APP["tables"])


def routes() -> dict:
    """The reference app's routes by name; the tenant hook is given to the driver."""
    common: dict = dict(
        statement_timeout_ms=APP["statement_timeout_ms"],
        idle_in_transaction_timeout_ms=APP["idle_in_transaction_timeout_ms"],
        stored_headers=APP["stored_headers"],
    )
    return {
        "payments": Route("POST", "/payments", **common),
        "orders": Route("POST", APP["order_route"], **common),
        "payouts": Route("POST", "/payouts", lease=APP["payout_lease"], **common),
    }


def args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dsn", required=True, help="PostgreSQL URI")
    p.add_argument("--port", type=int, required=True)
    return p.parse_args()


class BadRequest(Exception):
    pass


def parse_body(raw: bytes) -> dict:
    """A JSON object with an integer amount, or BadRequest (a final 400, stored and replayed)."""
    try:
        req = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise BadRequest("body is not JSON") from None
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object")
    if type(req.get("amount")) is not int:
        raise BadRequest("amount must be an integer")
    sleep = req.get("sleep_ms", 0)
    if type(sleep) not in (int, float) or sleep < 0:
        raise BadRequest("sleep_ms must be a non-negative number")
    if req.get("heartbeat") not in (None, True, False):
        raise BadRequest("heartbeat must be a boolean")
    if req.get("commit") not in (None, "api", "sql"):
        raise BadRequest('commit must be "api" or "sql"')
    return req


def bad_request_body(exc: BadRequest) -> bytes:
    return json.dumps({"error": "bad_request", "message": str(exc)},
                      separators=(",", ":")).encode()


def fill(template: str, **values: Any) -> bytes:
    # text templates, not a JSON serialiser: the large integer and 12.50 survive as written
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template.encode("utf-8")


class FailOnce:
    """fail: "transient" fails the first attempt this process sees for (tenant, key)."""

    def __init__(self) -> None:
        self._seen: set = set()
        self._lock = threading.Lock()

    def first(self, tenant: str, key: str) -> bool:
        with self._lock:
            if (tenant, key) in self._seen:
                return False
            self._seen.add((tenant, key))
            return True


class TransientFailure(Exception):
    pass
