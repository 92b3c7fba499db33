"""The framework-free part: what the HTTP contract (contract.json) says, as Python.

Nothing here talks to a database or a framework, so the sync (Django) and async (ASGI) drivers
share it, and the unit tests check it against the contract's vectors. Every fact (SQL text,
defaults, messages, the SQLSTATE table) is read from the shipped copy of contract.json.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "CONTRACT",
    "DEFAULTS",
    "Reject",
    "IdemError",
    "Route",
    "Claim",
    "HttpResponse",
    "parse_key",
    "is_final",
    "build_envelope",
    "replay",
    "error_body",
    "error_response",
    "error_name_for_sqlstate",
    "error_for_exception",
    "claim_sql",
    "claim_params",
    "statement",
]

# Headers are (name, value) pairs of str; a response is (status, headers, body bytes).
Headers = List[Tuple[str, str]]
HttpResponse = Tuple[int, Headers, bytes]


def _load_contract() -> dict:
    return json.loads(resources.files(__package__).joinpath("contract.json").read_text("utf-8"))


CONTRACT: dict = _load_contract()
DEFAULTS: dict = CONTRACT["defaults"]
ERRORS: dict = CONTRACT["errors"]
SQL: dict = CONTRACT["sql"]


# --- the key header -------------------------------------------------------------------------

def parse_key(header: Optional[str]) -> Optional[str]:
    """The key of an Idempotency-Key header value, or None when it is empty or malformed.

    Both forms of the IETF draft are accepted: a Structured Field string ("abc") and the bare
    token most clients send (abc); they name the same key. The caller tells a missing header
    (None in, key_missing) from an invalid one (None out, key_invalid).
    """
    if header is None:
        return None
    value = header.strip(" \t")
    if value.startswith('"'):
        if len(value) < 2 or not value.endswith('"'):
            return None
        out = []
        inner = value[1:-1]
        i = 0
        while i < len(inner):
            ch = inner[i]
            if not " " <= ch <= "~":
                return None
            if ch == "\\":
                i += 1
                if i == len(inner) or inner[i] not in '"\\':
                    return None
                ch = inner[i]
            elif ch == '"':
                return None
            out.append(ch)
            i += 1
        key = "".join(out)
    else:
        if any(not "!" <= ch <= "~" or ch == '"' for ch in value):
            return None
        key = value
    if not key or len(key) > DEFAULTS["max_key_length"]:
        return None
    return key


# --- the final-status rule ------------------------------------------------------------------

def is_final(status: int) -> bool:
    """A final response is stored and replayed; any other is rolled back so a retry runs again."""
    rule = DEFAULTS["final_status"]
    return rule["from"] <= status <= rule["to"] and status not in rule["except"]


# --- the envelope ---------------------------------------------------------------------------

def build_envelope(
    headers: Iterable[Tuple[str, str]], body: bytes, stored_headers: Sequence[str] = ()
) -> dict:
    """The response_body stored for a final response: the allow-listed headers and exact bytes."""
    allow = {h.lower() for h in (stored_headers or DEFAULTS["stored_headers"])}
    kept = {}
    for name, value in headers:
        if name.lower() in allow:
            kept[name.lower()] = value
    env: dict = {"http": 1, "headers": kept}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    # jsonb cannot hold U+0000, so such a body goes as base64 like a binary one
    if text is not None and "\x00" not in text:
        env["body"] = text
    else:
        env["body_base64"] = base64.b64encode(body).decode("ascii")
    return env


def envelope_json(env: dict) -> str:
    """The envelope as the text passed to ::jsonb (non-ASCII kept as is: jsonb stores it so)."""
    return json.dumps(env, ensure_ascii=False, separators=(",", ":"))


def replay(response_code: int, response_body: Optional[str]) -> Tuple[int, Headers, bytes]:
    """The stored response (claim's response_code and response_body::text) as status, headers, body.

    Without the replay header, which the driver adds (its name is configurable per route).
    """
    if response_body is None:
        return response_code, [], b""
    value = json.loads(response_body)
    if (
        isinstance(value, dict)
        and value.get("http") == 1
        and isinstance(value.get("headers"), dict)
        and (isinstance(value.get("body"), str) or isinstance(value.get("body_base64"), str))
    ):
        headers = [(str(k), str(v)) for k, v in value["headers"].items()]
        if isinstance(value.get("body"), str):
            body = value["body"].encode("utf-8")
        else:
            body = base64.b64decode(value["body_base64"])
        return response_code, headers, body
    # written by hand-written SQL, not by a package: replay the jsonb's own text
    return response_code, [("content-type", "application/json")], response_body.encode("utf-8")


# --- errors ---------------------------------------------------------------------------------

class Reject(Exception):
    """Raised by a tenant hook (or anything before the claim) to answer with an error body.

    Nothing is claimed or stored: e.g. Reject(400, "tenant_missing", "X-Tenant header required").
    """

    def __init__(self, status: int, error: str, message: str, headers: Optional[Headers] = None):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers = list(headers or [])

    def response(self) -> HttpResponse:
        headers = [("content-type", "application/json")] + self.headers
        return self.status, headers, error_body(self.error, self.message)


class IdemError(Exception):
    """One of the contract's errors (by name), ready to become an HTTP response."""

    def __init__(self, name: str, message: Optional[str] = None, retry_after: Optional[int] = None):
        spec = ERRORS[name]
        self.name = name
        self.status: int = spec["status"]
        self.message: str = message if message is not None else (spec["message"] or "")
        self.retry_after = retry_after
        super().__init__(f"{name}: {self.message}")

    def response(self, retry_after_default: Optional[int] = None) -> HttpResponse:
        return error_response(self.name, self.message, self.retry_after or retry_after_default)


def error_body(name: str, message: str) -> bytes:
    """Exactly {"error":"<name>","message":"<message>"}: compact, in that order."""
    return json.dumps({"error": name, "message": message}, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


def error_response(
    name: str, message: Optional[str] = None, retry_after: Optional[int] = None
) -> HttpResponse:
    spec = ERRORS[name]
    if message is None:
        message = spec["message"] or ""
    headers: Headers = [("content-type", "application/json")]
    if spec.get("retry_after"):
        headers.append(("retry-after", str(retry_after or DEFAULTS["retry_after_seconds"])))
    return spec["status"], headers, error_body(name, message)


def error_name_for_sqlstate(sqlstate: Optional[str]) -> str:
    """The contract's error for a SQLSTATE: first prefix that matches; none (a lost connection,
    a pool timeout) is unavailable; an unknown one is internal_error."""
    if not sqlstate:
        return "unavailable"
    for prefix, name in CONTRACT["sqlstates"]:
        if sqlstate.startswith(prefix):
            return name
    return "internal_error"


def _sqlstate_and_message(exc: BaseException) -> Tuple[Optional[str], Optional[str]]:
    # psycopg's own error, or the one Django wraps (its __cause__)
    for e in (exc, exc.__cause__):
        if e is None:
            continue
        state = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        diag = getattr(e, "diag", None)
        primary = getattr(diag, "message_primary", None) if diag is not None else None
        if state or primary:
            return state, primary
    return None, None


def error_for_exception(exc: BaseException) -> IdemError:
    """A database exception (psycopg, or Django's wrapper of it) as the contract's error."""
    if isinstance(exc, IdemError):
        return exc
    state, primary = _sqlstate_and_message(exc)
    name = error_name_for_sqlstate(state)
    # invalid_request carries the database's own message: it names the offending argument
    message = (primary or str(exc).strip()) if name == "invalid_request" else None
    return IdemError(name, message)


# --- the SQL --------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\$(\d+)")


def statement(sql_text: str) -> str:
    """contract SQL ($1, $2, ...) in the driver's paramstyle: %(p1)s, %(p2)s, ..."""
    return _PLACEHOLDER.sub(lambda m: f"%(p{m.group(1)})s", sql_text.replace("%", "%%"))


def claim_sql(fields: bool = False) -> str:
    """The claim statement with its {fingerprint} placeholder filled, as contract SQL ($n)."""
    fp = SQL["fingerprint_fields"] if fields else SQL["fingerprint_body"]
    return SQL["claim"].replace("{fingerprint}", fp)


def params(*values: Any) -> dict:
    """Positional values for statement(): params(a, b) == {"p1": a, "p2": b}."""
    return {f"p{i}": v for i, v in enumerate(values, 1)}


# --- per-route configuration ----------------------------------------------------------------

TenantHook = Callable[[Any], Any]


@dataclass
class Route:
    """How one route (method + template) uses pg_idem. Only method and route are required."""

    method: str
    route: str
    key_required: bool = True
    ttl: Optional[str] = None  # interval text; None: the database's default
    lease: Optional[str] = None  # interval text: lease mode (CONTRACT.md "Lease mode")
    fields: Optional[Sequence[str]] = None  # fingerprint these JSON fields, not the body bytes
    tenant: Optional[TenantHook] = None  # request -> tenant (may raise Reject); None: default
    stored_headers: Sequence[str] = field(default_factory=lambda: list(DEFAULTS["stored_headers"]))
    key_header: str = DEFAULTS["key_header"]
    replay_header: str = DEFAULTS["replay_header"]
    replay_header_value: str = DEFAULTS["replay_header_value"]
    statement_timeout_ms: int = DEFAULTS["statement_timeout_ms"]
    idle_in_transaction_timeout_ms: int = DEFAULTS["idle_in_transaction_timeout_ms"]
    retry_after_seconds: int = DEFAULTS["retry_after_seconds"]
    max_body_bytes: int = DEFAULTS["max_body_bytes"]  # over it: 413 payload_too_large

    def __post_init__(self) -> None:
        self.method = self.method.upper()
        self.sql_claim = statement(claim_sql(self.fields is not None))


def claim_params(route: Route, tenant: str, key: str, body: bytes) -> dict:
    values: list = [
        tenant,
        route.method,
        route.route,
        key,
        body,
        route.lease,
        route.ttl,
        str(route.statement_timeout_ms),
        str(route.idle_in_transaction_timeout_ms),
    ]
    if route.fields is not None:
        values.append(list(route.fields))
    return params(*values)


@dataclass
class Claim:
    """The claim statement's row."""

    scoped_key: str
    outcome: str
    fence: Optional[int]
    attempt: Optional[int]
    response_code: Optional[int]
    response_body: Optional[str]
    checkpoint_phase: Optional[str]
    checkpoint_data: Optional[str]
    retry_after: Optional[int]

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "Claim":
        return cls(*row[:9])


def outcome_response(route: Route, claim: Claim) -> Optional[HttpResponse]:
    """The answer for every outcome but claimed (None): a replay or an error response."""
    if claim.outcome in ("completed", "failed"):
        status, headers, body = replay(claim.response_code, claim.response_body)
        return status, headers + [(route.replay_header.lower(), route.replay_header_value)], body
    if claim.outcome == "in_progress":
        return error_response("in_progress", None, claim.retry_after or route.retry_after_seconds)
    if claim.outcome == "mismatch":
        return error_response("mismatch")
    if claim.outcome == "stale_key":
        return error_response("stale_key")
    if claim.outcome == "claimed":
        return None
    return error_response("internal_error")


def completion_statement(status: int) -> str:
    """complete for a success, fail_final for a final 4xx (both replayed alike)."""
    return statement(SQL["complete"] if status < 400 else SQL["fail_final"])


def parse_json_or_none(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)
