"""Django: a view decorator on Django's own connection and transaction.atomic.

    @idempotent("POST", "/payments", tenant=lambda request: request.user.account_id)
    def payments(request):
        with connection.cursor() as cur:   # inside the claim's transaction
            ...

The view runs inside transaction.atomic: Django refuses connection.commit() and rollback()
there, and a COMMIT sent as SQL is caught by the completion's txid check (500, nothing stored).
The fingerprint binds the request target as received: RAW_URI or REQUEST_URI when the WSGI
server gives it (gunicorn, uWSGI), else the decoded PATH_INFO escaped again (exact except for
an escaped reserved character such as %2F).

Django's postgresql backend (psycopg 3) binds parameters on the client by default, so nothing
is prepared on the server; with pgbouncer_options() in DATABASES it also works through
PgBouncer in transaction mode. The view runs in the claim's transaction (request.idem); in
lease mode it runs outside any transaction with request.idem a LeaseContext.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from functools import wraps
from typing import Any, Callable, Dict, Optional, Tuple

from django.db import Error as DjangoDbError
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connections, transaction
from django.http import HttpResponse

from .core import (
    Claim,
    IdemError,
    Reject,
    Route,
    SetupError,
    TransactionEnded,
    error_for_exception,
    error_response,
    is_final,
    outcome_name,
    outcome_response,
    params,
    parse_json_or_none,
    parse_key,
    request_target,
    split_target,
    tenant_hook,
    tenant_or_reject,
)
from .core import HttpResponse as Triple
from .core import _sqlstate_and_message as sqlstate_and_message
from .db import PgIdem
from .observe import record, request_span

try:  # a lost connection can surface as psycopg's own error, not wrapped by Django
    import psycopg

    _DB_ERRORS: tuple = (DjangoDbError, psycopg.Error, IdemError)
    _LOST: tuple = (DjangoOperationalError, DjangoInterfaceError, psycopg.OperationalError,
                    psycopg.InterfaceError)
except ImportError:  # pragma: no cover - psycopg2 backend
    _DB_ERRORS = (DjangoDbError, IdemError)
    _LOST = (DjangoOperationalError, DjangoInterfaceError)

log = logging.getLogger("pg_idem_http")

__all__ = ["idempotent", "check", "IdemContext", "LeaseContext", "pgbouncer_options"]

_located: Dict[Tuple[str, Optional[str]], PgIdem] = {}
_locate_lock = threading.Lock()


def check(using: str = "default", schema: Optional[str] = None) -> PgIdem:
    """Locate pg_idem in the database `using` and check its version, once per alias: raises
    SetupError saying what to do when it cannot be used. Call it at startup (AppConfig.ready,
    a management command) to refuse to start; otherwise the first request runs it."""
    found = _located.get((using, schema))
    if found is None:
        with _locate_lock:
            found = _located.get((using, schema))
            if found is None:
                with transaction.atomic(using=using):
                    found = PgIdem.locate(connections[using], schema)
                _located[(using, schema)] = found
    return found


def _is_database_error(exc: BaseException) -> bool:
    """An error answered by SQLSTATE. Django's and psycopg's refusals of an API misuse (commit()
    inside atomic) carry no SQLSTATE: the view's bug, the framework's error response."""
    if isinstance(exc, IdemError):
        return True
    if not isinstance(exc, _DB_ERRORS):
        return False
    return sqlstate_and_message(exc)[0] is not None or isinstance(exc, _LOST)


def target_of(request) -> str:
    """The request target as received, normalised ($11)."""
    meta = request.META
    raw = meta.get("RAW_URI") or meta.get("REQUEST_URI")
    if raw:  # as the server read the request line: latin-1 text of the raw bytes
        return split_target(raw.encode("latin-1"))
    # request.path: SCRIPT_NAME + PATH_INFO as Django decoded them (UTF-8; broken bytes %XX)
    return request_target(request.path.encode("utf-8"),
                          meta.get("QUERY_STRING", "").encode("latin-1"))


def pgbouncer_options(options: Optional[dict] = None) -> dict:
    """DATABASES["default"] entries for PgBouncer in transaction mode: merge into the entry.

    No server-side binding (the default: parameters bound on the client, nothing prepared) and
    no server-side cursors (QuerySet.iterator() would declare a cursor that outlives the
    transaction's server connection).
    """
    return {
        "DISABLE_SERVER_SIDE_CURSORS": True,
        "OPTIONS": {**(options or {}), "server_side_binding": False, "prepare_threshold": None},
    }


class IdemContext:
    """request.idem in transaction mode: the claim; connection is Django's, in its transaction."""

    lease = False

    def __init__(self, using: str, route: Route, tenant: str, key: Optional[str],
                 claim: Optional[Claim]):
        self.using, self.route, self.tenant, self.key = using, route, tenant, key
        self.conn = connections[using]
        self.scoped_key = claim.scoped_key if claim else None
        self.fence = claim.fence if claim else None
        self.attempt = claim.attempt if claim else None


class LeaseContext:
    """request.idem in lease mode. Each helper runs in a short transaction of its own."""

    lease = True

    def __init__(self, using: str, idem: PgIdem, route: Route, tenant: str, key: str,
                 claim: Claim):
        self.using, self.route, self.tenant, self.key = using, route, tenant, key
        self._idem = idem
        # the claim committed on its own: the completion runs in another transaction
        self.claim = Claim(**{**claim.__dict__, "txid": None})
        self.scoped_key: str = claim.scoped_key
        self.fence: Optional[int] = claim.fence
        self.attempt: Optional[int] = claim.attempt
        self.checkpoint_phase: Optional[str] = claim.checkpoint_phase
        self.checkpoint_data: Any = parse_json_or_none(claim.checkpoint_data)
        self.conn = None  # Django's connection once begin() opened the completion transaction
        self._atomic = None

    def _short(self, sql_text: str, *values: Any):
        with transaction.atomic(using=self.using), connections[self.using].cursor() as cur:
            cur.execute(sql_text, params(*values))
            return cur.fetchone()

    def downstream_key(self, step: str) -> str:
        """The same UUID on every attempt of this key: the external call's idempotency key."""
        return self._short(self._idem.sql.downstream_key, self.tenant, self.scoped_key, step)[0]

    def checkpoint(self, phase: str, data: Any = None) -> None:
        self._short(self._idem.sql.checkpoint, self.tenant, self.scoped_key, self.fence, phase,
                    None if data is None else json.dumps(data))
        self.checkpoint_phase, self.checkpoint_data = phase, data

    def heartbeat(self, lease: Optional[str] = None):
        return self._short(self._idem.sql.heartbeat, self.tenant, self.scoped_key, self.fence,
                           lease or self.route.lease)[0]

    def begin(self):
        """Open the completion transaction (assert_fence first: 55000 when the lease was lost).

        The package completes and commits it after the view returns; returns the connection.
        """
        if self._atomic is None:
            atomic = transaction.atomic(using=self.using)
            atomic.__enter__()
            try:
                with connections[self.using].cursor() as cur:
                    cur.execute(self._idem.sql.assert_fence,
                                params(self.tenant, self.scoped_key, self.fence))
            except BaseException:
                atomic.__exit__(*sys.exc_info())
                raise
            self._atomic, self.conn = atomic, connections[self.using]
        return self.conn

    transaction = begin

    def _finish(self, commit: bool) -> None:
        atomic, self._atomic, self.conn = self._atomic, None, None
        if atomic is None:
            return
        if not commit:
            transaction.set_rollback(True, using=self.using)
        atomic.__exit__(None, None, None)

    def _release(self) -> None:
        try:
            self._short(self._idem.sql.release, self.tenant, self.scoped_key, self.fence)
        except Exception as exc:  # lease already lost, or the database is gone
            log.warning("pg_idem: release of %r failed: %s", self.scoped_key, exc)


class _Answer(Exception):
    """Leaves transaction.atomic with a rollback and a response to send."""

    def __init__(self, response: HttpResponse):
        self.response = response


def _to_django(triple: Triple) -> HttpResponse:
    status, headers, body = triple
    response = HttpResponse(body, status=status)
    del response["Content-Type"]  # Django's default text/html would not be the stored response
    values: Dict[str, list] = {}
    for name, value in headers:  # Django sends one line per name: a name's values joined
        values.setdefault(name, []).append(value)
    for name, given in values.items():
        response[name] = ", ".join(given)
    return response


def _error(route: Route, exc: BaseException) -> HttpResponse:
    err = error_for_exception(exc)
    if err.name == "internal_error":
        log.error("pg_idem: database error", exc_info=exc)
    return _to_django(err.response(route.retry_after_seconds))


def _body_of(response) -> bytes:
    if hasattr(response, "render") and not getattr(response, "is_rendered", True):
        response.render()  # a TemplateResponse: its content exists only once rendered
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)
        response.streaming_content = [content]
        return content
    return response.content


def idempotent(method: str, route: str, *, using: str = "default",
               single_tenant: Optional[str] = None, schema: Optional[str] = None,
               **options: Any) -> Callable:
    """Make a view exactly-once per Idempotency-Key. Options are those of Route (key_required,
    ttl, lease, fields, tenant, stored_headers, replay_header, timeouts, retry_after_seconds);
    the tenant hook gets the request (None or "" is 400 tenant_missing); single_tenant instead
    names the one tenant every caller shares; schema names pg_idem's schema instead of finding
    it. Other methods reach the view untouched."""
    cfg = Route(method, route, **options)
    hook = tenant_hook(cfg.tenant, single_tenant)

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method != cfg.method:
                return view(request, *args, **kwargs)
            with request_span(cfg):
                return _handle(request, lambda: view(request, *args, **kwargs))

        def _handle(request, call):
            try:
                tenant = tenant_or_reject(hook(request))
            except Reject as rej:
                record("rejected", cfg, error=rej.error)
                return _to_django(rej.response())
            header = request.headers.get(cfg.key_header)
            key = parse_key(header)
            if header is None and cfg.key_required:
                record("rejected", cfg, error="key_missing")
                return _to_django(error_response("key_missing"))
            if header is not None and key is None:
                record("rejected", cfg, error="key_invalid")
                return _to_django(error_response("key_invalid"))
            # the declared length first, so that an oversized body is never read
            length = request.META.get("CONTENT_LENGTH") or ""
            too_long = length.isdigit() and int(length) > cfg.max_body_bytes
            if too_long or len(request.body) > cfg.max_body_bytes:
                record("rejected", cfg, error="payload_too_large")
                return _to_django(error_response("payload_too_large"))
            try:
                idem = check(using, schema)
            except SetupError as exc:
                record("database_error", cfg, exc=exc)
                return _to_django(error_response("internal_error"))
            except _DB_ERRORS as exc:
                record("database_error", cfg, error=type(exc).__name__)
                return _error(cfg, exc)
            target = target_of(request)
            if cfg.lease and key is not None:
                return _lease(cfg, using, idem, request, call, tenant, key, target)
            return _transaction(cfg, using, idem, request, call, tenant, key, target)

        # the claim must commit on its own, not inside ATOMIC_REQUESTS' transaction
        return transaction.non_atomic_requests(using=using)(wrapper)

    return decorate


def _finish(idem: PgIdem, using: str, route: Route, tenant: str, claim: Claim, response) -> None:
    idem.finish(connections[using], route, tenant, claim, response.status_code,
                response.items(), _body_of(response))


def _transaction(cfg, using, idem, request, call, tenant, key, target):
    body = request.body
    claimed = False
    try:
        with transaction.atomic(using=using):
            claim = None
            if key is not None:
                claim = idem.claim(connections[using], cfg, tenant, key, body, target)
                record(outcome_name(claim), cfg)
                early = outcome_response(cfg, claim)
                if early is not None:
                    raise _Answer(_to_django(early))
                claimed = True
            request.idem = IdemContext(using, cfg, tenant, key, claim)
            response = call()
            if not is_final(response.status_code):
                if claimed:
                    record("rolled_back", cfg, status=response.status_code)
                raise _Answer(response)  # rolled back: the retry runs again
            if claim is not None:
                _finish(idem, using, cfg, tenant, claim, response)
        # committed: only now may the client see it
        if claimed:
            record("stored", cfg, status=response.status_code)
        return response
    except _Answer as answer:
        return answer.response
    except TransactionEnded as exc:
        record("transaction_ended", cfg, exc=exc)
        return _to_django(error_response("internal_error"))
    except BaseException as exc:
        if not _is_database_error(exc):
            if claimed:
                record("rolled_back", cfg, error=type(exc).__name__)
            raise  # Django's own error response
        record("database_error", cfg, error=type(exc).__name__)
        return _error(cfg, exc)


def _lease(cfg, using, idem, request, call, tenant, key, target):
    body = request.body
    try:
        with transaction.atomic(using=using):
            claim = idem.claim(connections[using], cfg, tenant, key, body, target)
            record(outcome_name(claim), cfg)
            early = outcome_response(cfg, claim)
            if early is not None:
                raise _Answer(_to_django(early))
        # committed at once: durable, and others see a true Retry-After
    except _Answer as answer:
        return answer.response
    except _DB_ERRORS as exc:
        record("database_error", cfg, error=type(exc).__name__)
        return _error(cfg, exc)

    ctx = LeaseContext(using, idem, cfg, tenant, key, claim)
    request.idem = ctx
    try:
        response = call()
        if is_final(response.status_code):
            ctx.begin()  # the view's completion transaction, or a fresh one
            _finish(idem, using, cfg, tenant, ctx.claim, response)
            ctx._finish(commit=True)
            record("stored", cfg, status=response.status_code)
        else:
            ctx._finish(commit=False)
            ctx._release()
            record("rolled_back", cfg, status=response.status_code)
        return response
    except BaseException as exc:
        try:
            ctx._finish(commit=False)
        except Exception:  # the connection is gone: the server rolled back
            pass
        from_db = _is_database_error(exc)
        lost = from_db and error_for_exception(exc).name == "lease_lost"
        if not lost:
            ctx._release()
        record("lease_lost" if lost else "database_error" if from_db else "rolled_back",
               cfg, error=type(exc).__name__)
        if not from_db:
            raise  # Django's own error response
        return _error(cfg, exc)
