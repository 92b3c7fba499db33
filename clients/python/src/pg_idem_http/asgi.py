"""ASGI middleware (FastAPI, Starlette, any ASGI app) on psycopg 3's AsyncConnectionPool.

    pool = AsyncConnectionPool(dsn, kwargs={"prepare_threshold": None}, open=False)
    app.add_middleware(IdempotencyMiddleware, pool=pool, tenant=hook,
                       routes=[Route("POST", "/payments")])

The middleware claims the key before the app sees the request, buffers the app's response,
stores it and commits, and only then sends it: a client never sees a response whose effects
could still roll back. The handler finds the claim's connection at request.state.idem.conn,
inside a psycopg transaction block: its commit() and rollback() raise, so the handler cannot
end the claim's transaction through the driver (a COMMIT sent as SQL is caught by the txid).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import re
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg

from .core import (
    Claim,
    HttpResponse,
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
    tenant_hook,
    tenant_or_reject,
)
from .db import AsyncPgIdem
from .observe import record, request_span

log = logging.getLogger("pg_idem_http")

Scope = Dict[str, Any]
Message = Dict[str, Any]

__all__ = ["IdempotencyMiddleware", "IdemContext", "LeaseContext", "check"]

# pool -> {schema option: AsyncPgIdem}: pg_idem is located once per pool
_located: "weakref.WeakKeyDictionary[Any, Dict[Optional[str], AsyncPgIdem]]" = (
    weakref.WeakKeyDictionary())


async def check(pool, schema: Optional[str] = None) -> AsyncPgIdem:
    """Locate pg_idem through `pool` and check its version, once per pool: raises SetupError,
    whose message says what to do, when it cannot be used. Call it at the application's start
    to refuse to start (the middleware also runs it at lifespan startup and on first use)."""
    known = _located.setdefault(pool, {})
    if schema not in known:
        async with pool.connection() as conn:
            known[schema] = await AsyncPgIdem.locate(conn, schema)
    return known[schema]


class IdemContext:
    """What the handler gets in transaction mode (and without a key on an optional route)."""

    def __init__(self, conn, route: Route, tenant: str, key: Optional[str], claim: Optional[Claim]):
        self.conn: psycopg.AsyncConnection = conn  # inside the claim's transaction: use it
        self.route, self.tenant, self.key = route, tenant, key
        self.scoped_key = claim.scoped_key if claim else None
        self.fence = claim.fence if claim else None
        self.attempt = claim.attempt if claim else None
        self.lease = False


class LeaseContext:
    """What the handler gets in lease mode: it runs outside any transaction.

    Each helper takes a pooled connection for one short transaction, so no connection is held
    while the handler waits on another service. begin() opens the completion transaction.
    """

    def __init__(self, pool, idem: AsyncPgIdem, route: Route, tenant: str, key: str,
                 claim: Claim):
        self._pool, self._idem = pool, idem
        self.route, self.tenant, self.key = route, tenant, key
        # the claim committed on its own: the completion runs in another transaction
        self.claim = dataclasses.replace(claim, txid=None)
        self.scoped_key: str = claim.scoped_key
        self.fence: Optional[int] = claim.fence
        self.attempt: Optional[int] = claim.attempt
        self.checkpoint_phase: Optional[str] = claim.checkpoint_phase
        self.checkpoint_data: Any = parse_json_or_none(claim.checkpoint_data)
        self.conn: Optional[psycopg.AsyncConnection] = None  # set by begin()
        self._tx: Any = None
        self.lease = True

    async def _short(self, sql_text: str, *values: Any):
        async with self._pool.connection() as conn:  # commits on exit, rolls back on error
            cur = await conn.execute(sql_text, params(*values))
            return await cur.fetchone()

    async def downstream_key(self, step: str) -> str:
        """The same UUID on every attempt of this key: the external call's idempotency key."""
        (value,) = await self._short(self._idem.sql.downstream_key, self.tenant,
                                     self.scoped_key, step)
        return value

    async def checkpoint(self, phase: str, data: Any = None) -> None:
        """Save progress under the fence; a later attempt resumes from checkpoint_phase/_data."""
        await self._short(self._idem.sql.checkpoint, self.tenant, self.scoped_key, self.fence,
                          phase, None if data is None else json.dumps(data))
        self.checkpoint_phase, self.checkpoint_data = phase, data

    async def heartbeat(self, lease: Optional[str] = None):
        """Extend the lease (the route's, or the one given); returns the new lease_expires_at."""
        (value,) = await self._short(self._idem.sql.heartbeat, self.tenant, self.scoped_key,
                                     self.fence, lease or self.route.lease)
        return value

    async def begin(self) -> psycopg.AsyncConnection:
        """Open the completion transaction for the handler's writes; the package completes in it.

        assert_fence runs first and locks the key: a psycopg error with SQLSTATE 55000 (409
        lease_lost) when another attempt took it over. Calling it again returns the same one.
        The connection is inside a psycopg transaction block: its commit() and rollback() raise.
        """
        if self.conn is None:
            conn = await self._pool.getconn()
            tx = conn.transaction()
            try:
                await tx.__aenter__()
                await conn.execute(self._idem.sql.assert_fence,
                                   params(self.tenant, self.scoped_key, self.fence))
            except BaseException as exc:
                await _exit_quietly(tx, exc)
                await self._pool.putconn(conn)
                raise
            self.conn, self._tx = conn, tx
        return self.conn

    transaction = begin

    async def _finish(self, commit: bool) -> None:
        conn, tx, self.conn, self._tx = self.conn, self._tx, None, None
        if conn is None:
            return
        try:
            if commit:
                await tx.__aexit__(None, None, None)
            else:
                await _exit_quietly(tx, psycopg.Rollback())
        finally:
            await self._pool.putconn(conn)

    async def _release(self) -> None:
        # the retry is then claimed at once instead of after the lease
        try:
            await self._short(self._idem.sql.release, self.tenant, self.scoped_key, self.fence)
        except Exception as exc:  # lost the lease already, or the database is gone: nothing to do
            log.warning("pg_idem: release of %r failed: %s", self.scoped_key, exc)


async def _exit_quietly(tx, exc: BaseException) -> None:
    # leaves a psycopg transaction block with a rollback; a lost connection rolled back already
    try:
        await tx.__aexit__(type(exc), exc, None)
    except Exception:
        pass


def _template_regex(template: str) -> "re.Pattern[str]":
    # /orders/{id} and /files/{path:path} (Starlette's syntax); the template scopes the key
    out, pos = "^", 0
    for m in re.finditer(r"{([^}:]+)(?::([^}]+))?}", template):
        out += re.escape(template[pos:m.start()])
        out += ".+" if m.group(2) == "path" else "[^/]+"
        pos = m.end()
    return re.compile(out + re.escape(template[pos:]) + "$")


async def _send_response(send, response: HttpResponse) -> None:
    status, headers, body = response
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class _Buffered:
    """Holds the app's response messages until the transaction's fate is known."""

    def __init__(self) -> None:
        self.messages: List[Message] = []
        self.status: Optional[int] = None
        self.headers: List[Tuple[str, str]] = []
        self.body = bytearray()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [(k.decode("latin-1"), v.decode("latin-1"))
                            for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")
        self.messages.append(message)

    async def flush(self, send) -> None:
        for message in self.messages:
            await send(message)


def _is_database_error(exc: BaseException) -> bool:
    """An error the package answers by SQLSTATE. psycopg's own refusals (commit() inside the
    transaction block, a misuse of the API) carry no SQLSTATE and are the handler's bugs: they
    get the framework's error response like any exception."""
    if isinstance(exc, IdemError):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    return exc.sqlstate is not None or isinstance(exc, (psycopg.OperationalError,
                                                       psycopg.InterfaceError))


class IdempotencyMiddleware:
    """Pure ASGI middleware; routes it does not know pass through untouched.

    pool: a psycopg_pool.AsyncConnectionPool, opened by the app (kwargs prepare_threshold=None
    so that it works through PgBouncer in transaction mode). routes: Route objects. tenant: the
    tenant hook for every route without its own, called with the ASGI scope (may be async, may
    raise Reject; None or "" is 400 tenant_missing). single_tenant: instead of a hook, the one
    tenant every caller shares. schema: pg_idem's schema, instead of finding it (sql.locate).

    pg_idem's schema and version are checked once, at the application's startup (lifespan:
    the startup fails with the reason) or else on the first request.
    """

    def __init__(self, app, *, pool, routes: Sequence[Route], tenant: Optional[Callable] = None,
                 single_tenant: Optional[str] = None, schema: Optional[str] = None):
        self.app, self.pool, self.schema = app, pool, schema
        self.routes = [(r, _template_regex(r.route),
                        tenant_hook(r.tenant or tenant, single_tenant))
                       for r in routes]
        self.idem: Optional[AsyncPgIdem] = None
        self._lock: Optional[asyncio.Lock] = None

    async def ready(self) -> AsyncPgIdem:
        """Locate pg_idem and check its version (once): SetupError when it cannot be used."""
        if self.idem is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self.idem is None:
                    self.idem = await check(self.pool, self.schema)
        return self.idem

    def _match(self, scope: Scope) -> Optional[Tuple[Route, Callable]]:
        for route, rx, hook in self.routes:
            if route.method == scope["method"] and rx.match(scope["path"]):
                return route, hook
        return None

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, self._startup_check(send))
        found = self._match(scope) if scope["type"] == "http" else None
        if found is None:
            return await self.app(scope, receive, send)
        route, hook = found
        with request_span(route):
            try:
                await self._handle(route, hook, scope, receive, send)
            except Reject as rej:
                record("rejected", route, error=rej.error)
                await _send_response(send, rej.response())
            except _Disconnected:
                pass  # the client left before its body arrived: nothing was claimed

    def _startup_check(self, send):
        async def checked_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                try:
                    await self.ready()
                except SetupError as exc:  # the application must not start
                    log.error("pg_idem: %s", exc)
                    message = {"type": "lifespan.startup.failed", "message": str(exc)}
            await send(message)
        return checked_send

    async def _handle(self, route: Route, hook: Callable, scope: Scope, receive, send) -> None:
        # the tenant first: it is the application's auth, answered before anything about keys
        value = hook(scope)
        if inspect.isawaitable(value):
            value = await value
        tenant = tenant_or_reject(value)
        name = route.key_header.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]
        header = ", ".join(values) if values else None
        key = parse_key(header)
        if header is None and route.key_required:
            record("rejected", route, error="key_missing")
            return await _send_response(send, error_response("key_missing"))
        if header is not None and key is None:
            record("rejected", route, error="key_invalid")
            return await _send_response(send, error_response("key_invalid"))

        try:
            body = await _read_body(receive, route.max_body_bytes)
        except _TooLarge:
            record("rejected", route, error="payload_too_large")
            return await _send_response(send, error_response("payload_too_large"))
        # the target as received: raw_path keeps the client's escapes (path is decoded)
        target = request_target(scope.get("raw_path") or scope["path"].encode("utf-8"),
                                scope.get("query_string", b""))
        replayed = False

        async def app_receive() -> Message:
            # the app reads the body we already read; after it, disconnects come through
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        try:
            idem = await self.ready()
        except SetupError as exc:
            record("database_error", route, exc=exc)
            return await _send_response(send, error_response("internal_error"))
        except (psycopg.Error, OSError) as exc:
            record("database_error", route, error=type(exc).__name__)
            return await _send_error(send, route, exc)
        if route.lease and key is not None:
            return await self._lease(idem, route, scope, app_receive, send, tenant, key, body,
                                     target)
        return await self._transaction(idem, route, scope, app_receive, send, tenant, key,
                                       body, target)

    async def _transaction(self, idem, route, scope, receive, send, tenant, key, body,
                           target) -> None:
        buffered = _Buffered()
        answer: Optional[HttpResponse] = None
        claimed = False
        try:
            async with self.pool.connection() as conn:
                # psycopg's transaction block: inside it the handler's commit()/rollback() raise
                async with conn.transaction():
                    claim = None
                    if key is not None:
                        claim = await idem.claim(conn, route, tenant, key, body, target)
                        record(outcome_name(claim), route)
                        answer = outcome_response(route, claim)
                        if answer is not None:
                            raise psycopg.Rollback()
                        claimed = True
                    ctx = IdemContext(conn, route, tenant, key, claim)
                    await self.app(_with_idem(scope, ctx), receive, buffered.send)
                    if buffered.status is None:
                        raise RuntimeError("the app returned without a response")
                    if not is_final(buffered.status):
                        if claimed:
                            record("rolled_back", route, status=buffered.status)
                        raise psycopg.Rollback()  # the retry runs again
                    if claim is not None:
                        await idem.finish(conn, route, tenant, claim, buffered.status,
                                          buffered.headers, bytes(buffered.body))
                # committed
                if claimed and is_final(buffered.status or 0):
                    record("stored", route, status=buffered.status)
        except TransactionEnded as exc:
            record("transaction_ended", route, exc=exc)
            return await _send_response(send, error_response("internal_error"))
        except BaseException as exc:
            if not _is_database_error(exc):
                if claimed:
                    record("rolled_back", route, error=type(exc).__name__)
                raise  # the framework's error response
            record("database_error", route, error=type(exc).__name__)
            return await _send_error(send, route, exc)
        if answer is not None:
            return await _send_response(send, answer)
        # committed (or rolled back for a non-final status): now the client may see it
        await buffered.flush(send)

    async def _lease(self, idem, route, scope, receive, send, tenant, key, body, target) -> None:
        try:
            async with self.pool.connection() as conn:
                async with conn.transaction():
                    claim = await idem.claim(conn, route, tenant, key, body, target)
                    record(outcome_name(claim), route)
                    early = outcome_response(route, claim)
                    if early is not None:
                        raise psycopg.Rollback()
                # committed at once: durable, and others see a true Retry-After
        except psycopg.Error as exc:
            record("database_error", route, error=type(exc).__name__)
            return await _send_error(send, route, exc)
        if early is not None:
            return await _send_response(send, early)

        ctx = LeaseContext(self.pool, idem, route, tenant, key, claim)
        buffered = _Buffered()
        try:
            await self.app(_with_idem(scope, ctx), receive, buffered.send)
            if buffered.status is None:
                raise RuntimeError("the app returned without a response")
            if is_final(buffered.status):
                # in the handler's transaction if it opened one, else in a fresh one
                conn = await ctx.begin()
                await idem.finish(conn, route, tenant, ctx.claim, buffered.status,
                                  buffered.headers, bytes(buffered.body))
                await ctx._finish(commit=True)
                record("stored", route, status=buffered.status)
            else:
                await ctx._finish(commit=False)
                await ctx._release()
                record("rolled_back", route, status=buffered.status)
        except BaseException as exc:
            await ctx._finish(commit=False)
            from_db = _is_database_error(exc)
            lost = from_db and error_for_exception(exc).name == "lease_lost"
            if not lost:
                await ctx._release()
            record("lease_lost" if lost else "database_error" if from_db else "rolled_back",
                   route, error=type(exc).__name__)
            if not from_db:
                raise  # the framework's error response
            return await _send_error(send, route, exc)
        await buffered.flush(send)


async def _send_error(send, route: Route, exc: BaseException) -> None:
    err = error_for_exception(exc)
    if err.name == "internal_error":
        log.error("pg_idem: database error", exc_info=exc)
    await _send_response(send, err.response(route.retry_after_seconds))


def _with_idem(scope: Scope, ctx) -> Scope:
    # Starlette's request.state reads scope["state"]; copied so no other request sees ctx
    scope = dict(scope)
    scope["state"] = {**scope.get("state", {}), "idem": ctx}
    return scope


async def _read_body(receive, limit: int) -> bytes:
    """The whole body, for the fingerprint: at most `limit` bytes held (the rest is not read)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


class _Disconnected(Exception):
    pass


class _TooLarge(Exception):
    pass
