"""Django: a view decorator on Django's own connection and transaction.atomic.

    @idempotent("POST", "/payments", tenant=lambda request: request.user.account_id)
    def payments(request):
        with connection.cursor() as cur:   # inside the claim's transaction
            ...

Django's postgresql backend (psycopg 3) binds parameters on the client by default, so nothing
is prepared on the server; with pgbouncer_options() in DATABASES it also works through
PgBouncer in transaction mode. The view runs in the claim's transaction (request.idem); in
lease mode it runs outside any transaction with request.idem a LeaseContext.
"""

from __future__ import annotations

import json
import logging
import sys
from functools import wraps
from typing import Any, Callable, Optional

from django.db import Error as DjangoDbError
from django.db import connections, transaction
from django.http import HttpResponse

from .core import (
    DEFAULTS,
    SQL,
    Claim,
    HttpResponse as Triple,
    IdemError,
    Reject,
    Route,
    build_envelope,
    claim_params,
    completion_statement,
    envelope_json,
    error_for_exception,
    error_response,
    is_final,
    outcome_response,
    params,
    parse_json_or_none,
    parse_key,
    statement,
)

try:  # a lost connection can surface as psycopg's own error, not wrapped by Django
    import psycopg

    _DB_ERRORS: tuple = (DjangoDbError, psycopg.Error, IdemError)
except ImportError:  # pragma: no cover - psycopg2 backend
    _DB_ERRORS = (DjangoDbError, IdemError)

log = logging.getLogger("pg_idem_http")

__all__ = ["idempotent", "IdemContext", "LeaseContext", "pgbouncer_options"]


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

    def __init__(self, using: str, route: Route, tenant: str, key: str, claim: Claim):
        self.using, self.route, self.tenant, self.key = using, route, tenant, key
        self.scoped_key: str = claim.scoped_key
        self.fence: int = claim.fence
        self.attempt: int = claim.attempt
        self.checkpoint_phase: Optional[str] = claim.checkpoint_phase
        self.checkpoint_data: Any = parse_json_or_none(claim.checkpoint_data)
        self.conn = None  # Django's connection once begin() opened the completion transaction
        self._atomic = None

    def _short(self, sql_text: str, *values: Any):
        with transaction.atomic(using=self.using), connections[self.using].cursor() as cur:
            cur.execute(statement(sql_text), params(*values))
            return cur.fetchone()

    def downstream_key(self, step: str) -> str:
        """The same UUID on every attempt of this key: the external call's idempotency key."""
        return self._short(SQL["downstream_key"], self.tenant, self.scoped_key, step)[0]

    def checkpoint(self, phase: str, data: Any = None) -> None:
        self._short(SQL["checkpoint"], self.tenant, self.scoped_key, self.fence, phase,
                    None if data is None else json.dumps(data))
        self.checkpoint_phase, self.checkpoint_data = phase, data

    def heartbeat(self, lease: Optional[str] = None):
        return self._short(SQL["heartbeat"], self.tenant, self.scoped_key, self.fence,
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
                    cur.execute(statement(SQL["assert_fence"]),
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
            self._short(SQL["release"], self.tenant, self.scoped_key, self.fence)
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
    for name, value in headers:
        response[name] = value
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


def _complete(using: str, route: Route, tenant: str, scoped_key: str, fence: int,
              response) -> None:
    body = _body_of(response)
    env = build_envelope(response.items(), body, route.stored_headers)
    with connections[using].cursor() as cur:
        cur.execute(completion_statement(response.status_code),
                    params(tenant, scoped_key, fence, response.status_code, envelope_json(env)))


def idempotent(method: str, route: str, *, using: str = "default", **options: Any) -> Callable:
    """Make a view exactly-once per Idempotency-Key. Options are those of Route (key_required,
    ttl, lease, fields, tenant, stored_headers, replay_header, timeouts, retry_after_seconds);
    the tenant hook gets the request. Other methods reach the view untouched."""
    cfg = Route(method, route, **options)

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method != cfg.method:
                return view(request, *args, **kwargs)
            try:
                tenant = cfg.tenant(request) if cfg.tenant else DEFAULTS["tenant"]
            except Reject as rej:
                return _to_django(rej.response())
            header = request.headers.get(cfg.key_header)
            key = parse_key(header)
            if header is None and cfg.key_required:
                return _to_django(error_response("key_missing"))
            if header is not None and key is None:
                return _to_django(error_response("key_invalid"))
            # the declared length first, so that an oversized body is never read
            length = request.META.get("CONTENT_LENGTH") or ""
            too_long = length.isdigit() and int(length) > cfg.max_body_bytes
            if too_long or len(request.body) > cfg.max_body_bytes:
                return _to_django(error_response("payload_too_large"))
            call = lambda: view(request, *args, **kwargs)  # noqa: E731
            if cfg.lease and key is not None:
                return _lease(cfg, using, request, call, tenant, key)
            return _transaction(cfg, using, request, call, tenant, key)

        # the claim must commit on its own, not inside ATOMIC_REQUESTS' transaction
        return transaction.non_atomic_requests(using=using)(wrapper)

    return decorate


def _claim(cfg: Route, using: str, tenant: str, key: str, body: bytes) -> Claim:
    with connections[using].cursor() as cur:
        cur.execute(cfg.sql_claim, claim_params(cfg, tenant, key, body))
        return Claim.from_row(cur.fetchone())


def _transaction(cfg, using, request, call, tenant, key):
    body = request.body
    try:
        with transaction.atomic(using=using):
            claim = None
            if key is not None:
                claim = _claim(cfg, using, tenant, key, body)
                early = outcome_response(cfg, claim)
                if early is not None:
                    raise _Answer(_to_django(early))
            request.idem = IdemContext(using, cfg, tenant, key, claim)
            response = call()
            if not is_final(response.status_code):
                raise _Answer(response)  # rolled back: the retry runs again
            if claim is not None:
                _complete(using, cfg, tenant, claim.scoped_key, claim.fence, response)
        # committed: only now may the client see it
        return response
    except _Answer as answer:
        return answer.response
    except _DB_ERRORS as exc:
        return _error(cfg, exc)


def _lease(cfg, using, request, call, tenant, key):
    body = request.body
    try:
        with transaction.atomic(using=using):
            claim = _claim(cfg, using, tenant, key, body)
            early = outcome_response(cfg, claim)
            if early is not None:
                raise _Answer(_to_django(early))
        # committed at once: durable, and others see a true Retry-After
    except _Answer as answer:
        return answer.response
    except _DB_ERRORS as exc:
        return _error(cfg, exc)

    ctx = LeaseContext(using, cfg, tenant, key, claim)
    request.idem = ctx
    try:
        response = call()
        if is_final(response.status_code):
            ctx.begin()  # the view's completion transaction, or a fresh one
            _complete(using, cfg, tenant, ctx.scoped_key, ctx.fence, response)
            ctx._finish(commit=True)
        else:
            ctx._finish(commit=False)
            ctx._release()
        return response
    except BaseException as exc:
        try:
            ctx._finish(commit=False)
        except Exception:  # the connection is gone: the server rolled back
            pass
        from_db = isinstance(exc, _DB_ERRORS)
        if not (from_db and error_for_exception(exc).name == "lease_lost"):
            ctx._release()
        if not from_db:
            raise  # Django's own error response
        return _error(cfg, exc)
