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
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

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
    "Statements",
    "SetupError",
    "TransactionEnded",
    "request_target",
    "split_target",
    "version_ok",
    "quote_ident",
    "check_stored_headers",
    "tenant_hook",
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

def check_stored_headers(names: Iterable[str]) -> List[str]:
    """The allow-list, lower-cased; naming a never-stored header is a configuration error.

    A replay goes to whoever holds the key, so a cookie or a credential in it would be handed
    to another caller: no configuration can store one.
    """
    lowered = [n.lower() for n in names]
    forbidden = sorted(set(lowered) & set(DEFAULTS["never_stored_headers"]))
    if forbidden:
        raise ValueError(f"stored_headers names {', '.join(forbidden)}: these headers are never"
                         " stored or replayed (contract.json defaults.never_stored_headers)")
    return lowered


def build_envelope(
    headers: Iterable[Tuple[str, str]], body: bytes, stored_headers: Optional[Sequence[str]] = None
) -> dict:
    """The response_body stored for a final response: the allow-listed headers, each an array of
    its values in the response's order, and the body's exact bytes."""
    allow = set(check_stored_headers(stored_headers or DEFAULTS["stored_headers"]))
    kept: Dict[str, List[str]] = {}
    for name, value in headers:
        if name.lower() in allow:
            kept.setdefault(name.lower(), []).append(value)
    env: dict = {"http": 2, "headers": kept}
    try:
        text: Optional[str] = body.decode("utf-8")
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


class BadEnvelope(Exception):
    """A stored envelope of an unknown version: 500 internal_error, nothing replayed."""


def replay(response_code: int, response_body: Optional[str]) -> HttpResponse:
    """The stored response (claim's response_code and response_body::text) as status, headers
    (one pair per stored value, in the stored order), body. Reads envelopes of contract 1
    (one string per name) and 2 (arrays); never replays a never-stored header.

    Without the replay header, which the driver adds (its name is configurable per route).
    """
    if response_body is None:
        return response_code, [], b""
    value = json.loads(response_body)
    if not (isinstance(value, dict) and "http" in value
            and isinstance(value.get("headers"), dict)
            and (isinstance(value.get("body"), str) or isinstance(value.get("body_base64"), str))):
        # written by hand-written SQL, not by a package: replay the jsonb's own text
        return response_code, [("content-type", "application/json")], response_body.encode("utf-8")
    version = value["http"]
    if version not in (1, 2) or isinstance(version, bool):
        raise BadEnvelope(f"stored envelope has http {version!r}")
    never = set(DEFAULTS["never_stored_headers"])
    headers: Headers = []
    for name, stored in value["headers"].items():
        if name.lower() in never:
            continue
        for item in ([stored] if version == 1 else stored):
            headers.append((str(name), str(item)))
    if isinstance(value.get("body"), str):
        body = value["body"].encode("utf-8")
    else:
        body = base64.b64decode(value["body_base64"])
    return response_code, headers, body


# --- the request target ---------------------------------------------------------------------

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_RESERVED = frozenset(b":/?#[]@!$&'()*+,;=")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _normalise_part(octets: bytes) -> str:
    out = []
    i = 0
    while i < len(octets):
        b = octets[i]
        if b == 0x25 and i + 2 < len(octets) and octets[i + 1] in _HEX and octets[i + 2] in _HEX:
            value = int(octets[i + 1:i + 3], 16)
            out.append(chr(value) if value in _UNRESERVED else "%%%02X" % value)
            i += 3
            continue
        if b in _UNRESERVED or b in _RESERVED:
            out.append(chr(b))
        else:  # a lone %, a space, a non-ASCII octet, a quote...
            out.append("%%%02X" % b)
        i += 1
    return "".join(out)


def _octets(part: Union[str, bytes]) -> bytes:
    return part.encode("utf-8") if isinstance(part, str) else part


def request_target(path: Union[str, bytes], query: Union[str, bytes] = b"") -> str:
    """The normalised request target ($11): path and query string normalised separately, as
    octets (RFC 3986 6.2.2: unreserved escapes decoded, other escapes' hex upper-cased, what is
    neither unreserved nor reserved escaped); `?query` only when the query is not empty."""
    target = _normalise_part(_octets(path))
    q = _octets(query)
    return f"{target}?{_normalise_part(q)}" if q else target


def split_target(received: Union[str, bytes]) -> str:
    """request_target() of a raw target as received (`/path?query`)."""
    raw = _octets(received)
    path, _, query = raw.partition(b"?")
    return request_target(path, query)


# --- the version check and the schema --------------------------------------------------------

def quote_ident(name: str) -> str:
    """PostgreSQL's quote_ident rule, for a schema given as an option."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _version_tuple(text: Any) -> Optional[Tuple[int, int, int]]:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", text) if isinstance(text, str) else None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def version_ok(installed: Any) -> bool:
    """MAJOR.MINOR.PATCH at least min_pg_idem_version; anything else is too old."""
    have = _version_tuple(installed)
    need = _version_tuple(CONTRACT["min_pg_idem_version"])
    return have is not None and need is not None and have >= need


class SetupError(RuntimeError):
    """pg_idem cannot be used through this pool: the application must not start."""


def located_schema(row: Optional[Sequence[Any]]) -> str:
    """The schema from sql.locate's row, or SetupError saying what to do."""
    if row is None:
        raise SetupError("pg_idem is not installed in this database: CREATE EXTENSION pg_idem"
                         " (or install its SQL edition), or pass schema= naming where it is")
    schema, foreign = row[0], row[1]
    if foreign is not None:
        raise SetupError(f"pg_idem's schema {schema} holds idem_* functions that are not"
                         f" pg_idem's: {foreign}; drop them (another role planted them)")
    return schema


def checked_version(installed: Any) -> str:
    if not version_ok(installed):
        raise SetupError(f"pg_idem {installed} is installed; this package needs"
                         f" {CONTRACT['min_pg_idem_version']} or later: ALTER EXTENSION"
                         " pg_idem UPDATE (or install a newer SQL edition)")
    return str(installed)


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


def statement(sql_text: str, schema: Optional[str] = None) -> str:
    """contract SQL ($1, $2, ...) in psycopg's paramstyle (%(p1)s, ...), with {schema} replaced
    by pg_idem's schema (already quoted, as sql.locate returns it)."""
    if schema is not None:
        sql_text = sql_text.replace("{schema}", schema)
    return _PLACEHOLDER.sub(lambda m: f"%(p{m.group(1)})s", sql_text.replace("%", "%%"))


def claim_sql(fields: bool = False) -> str:
    """The claim statement with its {fingerprint} placeholder filled, as contract SQL ($n)."""
    fp = SQL["fingerprint_fields"] if fields else SQL["fingerprint_body"]
    return SQL["claim"].replace("{fingerprint}", fp)


def params(*values: Any) -> dict:
    """Positional values for statement(): params(a, b) == {"p1": a, "p2": b}."""
    return {f"p{i}": v for i, v in enumerate(values, 1)}


class Statements:
    """Every statement of contract.json for one located schema, in psycopg's paramstyle."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.claim_body = statement(claim_sql(False), schema)
        self.claim_fields = statement(claim_sql(True), schema)
        self.version = statement(SQL["version"], schema)
        self.complete = statement(SQL["complete"], schema)
        self.fail_final = statement(SQL["fail_final"], schema)
        self.release = statement(SQL["release"], schema)
        self.assert_fence = statement(SQL["assert_fence"], schema)
        self.heartbeat = statement(SQL["heartbeat"], schema)
        self.checkpoint = statement(SQL["checkpoint"], schema)
        self.downstream_key = statement(SQL["downstream_key"], schema)

    def claim(self, route: "Route") -> str:
        return self.claim_fields if route.fields is not None else self.claim_body

    def completion(self, status: int) -> str:
        """complete for a success, fail_final for a final 4xx (both replayed alike)."""
        return self.complete if status < 400 else self.fail_final


LOCATE = SQL["locate"]


# --- the tenant -----------------------------------------------------------------------------

TenantHook = Callable[[Any], Any]


def tenant_hook(hook: Optional[TenantHook], single_tenant: Optional[str]) -> TenantHook:
    """The hook that names a request's tenant. One of the two is required, not both: without a
    hook the application must say in its own code that every caller shares one namespace."""
    if hook is not None and single_tenant is not None:
        raise ValueError("give a tenant hook or single_tenant, not both")
    if hook is not None:
        return hook
    if single_tenant is None:
        raise ValueError("pg_idem needs the tenant of each request: pass tenant=<hook that"
                         " returns the caller's account>, or single_tenant=<name> when every"
                         " caller shares one namespace")
    if not isinstance(single_tenant, str) or not single_tenant:
        raise ValueError("single_tenant must be a non-empty string")
    return lambda request: single_tenant


def tenant_or_reject(value: Any) -> str:
    """The hook's answer; None or "" is 400 tenant_missing (there is no default tenant)."""
    if value is None or value == "":
        raise Reject(ERRORS["tenant_missing"]["status"], "tenant_missing",
                     ERRORS["tenant_missing"]["message"])
    return str(value)


# --- per-route configuration ----------------------------------------------------------------

@dataclass
class Route:
    """How one route (method + template) uses pg_idem. Only method and route are required."""

    method: str
    route: str  # the template, parameters written {name}: the key's scope
    key_required: bool = True
    ttl: Optional[str] = None  # interval text; None: the database's default
    lease: Optional[str] = None  # interval text: lease mode (CONTRACT.md "Lease mode")
    fields: Optional[Sequence[str]] = None  # fingerprint these JSON fields, not the body bytes
    tenant: Optional[TenantHook] = None  # request -> tenant (may raise Reject); else the app's
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
        self.stored_headers = check_stored_headers(self.stored_headers)


def claim_params(route: Route, tenant: str, key: str, body: bytes, target: str) -> dict:
    """$1..$11 of the claim ($10 target: request_target() of the request as received; $11 the
    field list, referenced in fields mode only)."""
    return params(
        tenant,
        route.method,
        route.route,
        key,
        body,
        route.lease,
        route.ttl,
        str(route.statement_timeout_ms),
        str(route.idle_in_transaction_timeout_ms),
        target,
        list(route.fields) if route.fields is not None else None,
    )


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
    txid: Optional[int] = None  # the claim's transaction: the completion must run in it

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "Claim":
        return cls(*row[:10])


def completion_params(tenant: str, claim: Claim, status: int, envelope: str) -> dict:
    return params(tenant, claim.scoped_key, claim.fence, status, envelope, claim.txid)


class TransactionEnded(Exception):
    """The completion ran outside the claim's transaction: the handler ended it (COMMIT or
    ROLLBACK sent as SQL). 500 internal_error, nothing stored, outcome transaction_ended."""


def outcome_name(claim: Claim) -> str:
    """The claim's outcome as one of contract.json's outcomes."""
    return {"completed": "replayed", "failed": "replayed", "claimed": "claimed",
            "in_progress": "in_progress", "mismatch": "mismatch"}.get(claim.outcome, "rejected")


def outcome_response(route: Route, claim: Claim) -> Optional[HttpResponse]:
    """The answer for every outcome but claimed (None): a replay or an error response."""
    if claim.outcome in ("completed", "failed"):
        try:
            status, headers, body = replay(claim.response_code or 0, claim.response_body)
        except BadEnvelope:
            return error_response("internal_error")
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


def parse_json_or_none(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)
