"""ASGI middleware (FastAPI, Starlette, any ASGI app) on psycopg 3's AsyncConnectionPool.

    pool = AsyncConnectionPool(dsn, kwargs={"prepare_threshold": None}, open=False)
    app.add_middleware(IdempotencyMiddleware, pool=pool, routes=[Route("POST", "/payments")])

The middleware claims the key before the app sees the request, buffers the app's response,
stores it and commits, and only then sends it: a client never sees a response whose effects
could still roll back. The handler finds the claim's connection at request.state.idem.conn.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg

from .core import (
    DEFAULTS,
    SQL,
    Claim,
    HttpResponse,
    IdemError,
    Reject,
    Route,
    claim_params,
    build_envelope,
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

log = logging.getLogger("pg_idem_http")

Scope = Dict[str, Any]
Message = Dict[str, Any]

__all__ = ["IdempotencyMiddleware", "IdemContext", "LeaseContext"]


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

    def __init__(self, pool, route: Route, tenant: str, key: str, claim: Claim):
        self._pool = pool
        self.route, self.tenant, self.key = route, tenant, key
        self.scoped_key: str = claim.scoped_key
        self.fence: int = claim.fence
        self.attempt: int = claim.attempt
        self.checkpoint_phase: Optional[str] = claim.checkpoint_phase
        self.checkpoint_data: Any = parse_json_or_none(claim.checkpoint_data)
        self.conn: Optional[psycopg.AsyncConnection] = None  # set by begin()
        self.lease = True

    async def _short(self, sql_text: str, *values: Any):
        async with self._pool.connection() as conn:  # commits on exit, rolls back on error
            cur = await conn.execute(statement(sql_text), params(*values))
            return await cur.fetchone()

    async def downstream_key(self, step: str) -> str:
        """The same UUID on every attempt of this key: the external call's idempotency key."""
        (value,) = await self._short(SQL["downstream_key"], self.tenant, self.scoped_key, step)
        return value

    async def checkpoint(self, phase: str, data: Any = None) -> None:
        """Save progress under the fence; a later attempt resumes from checkpoint_phase/_data."""
        await self._short(SQL["checkpoint"], self.tenant, self.scoped_key, self.fence, phase,
                          None if data is None else json.dumps(data))
        self.checkpoint_phase, self.checkpoint_data = phase, data

    async def heartbeat(self, lease: Optional[str] = None):
        """Extend the lease (the route's, or the one given); returns the new lease_expires_at."""
        (value,) = await self._short(SQL["heartbeat"], self.tenant, self.scoped_key, self.fence,
                                     lease or self.route.lease)
        return value

    async def begin(self) -> psycopg.AsyncConnection:
        """Open the completion transaction for the handler's writes; the package completes in it.

        assert_fence runs first and locks the key: a psycopg error with SQLSTATE 55000 (409
        lease_lost) when another attempt took it over. Calling it again returns the same one.
        """
        if self.conn is None:
            conn = await self._pool.getconn()
            try:
                await conn.execute(statement(SQL["assert_fence"]),
                                   params(self.tenant, self.scoped_key, self.fence))
            except BaseException:
                await _rollback_quietly(conn)
                await self._pool.putconn(conn)
                raise
            self.conn = conn
        return self.conn

    transaction = begin

    async def _finish(self, commit: bool) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if commit:
                await conn.commit()
            else:
                await _rollback_quietly(conn)
        finally:
            await self._pool.putconn(conn)

    async def _release(self) -> None:
        # the retry is then claimed at once instead of after the lease
        try:
            await self._short(SQL["release"], self.tenant, self.scoped_key, self.fence)
        except Exception as exc:  # lost the lease already, or the database is gone: nothing to do
            log.warning("pg_idem: release of %r failed: %s", self.scoped_key, exc)


async def _rollback_quietly(conn) -> None:
    try:
        await conn.rollback()
    except Exception:  # a lost connection: the server rolled back already
        pass


def _template_regex(template: str) -> "re.Pattern[str]":
    # /orders/{id} and /files/{path:path} (Starlette's syntax); the template, not the path, scopes the key
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


class IdempotencyMiddleware:
    """Pure ASGI middleware; routes it does not know pass through untouched.

    pool: a psycopg_pool.AsyncConnectionPool, opened by the app (kwargs prepare_threshold=None
    so that it works through PgBouncer in transaction mode). routes: Route objects. tenant: the
    default tenant hook for every route, called with the ASGI scope (may be async, may raise
    Reject); without one the tenant is the contract's default.
    """

    def __init__(self, app, *, pool, routes: Sequence[Route], tenant: Optional[Callable] = None):
        self.app, self.pool, self.tenant = app, pool, tenant
        self.routes = [(r, _template_regex(r.route)) for r in routes]

    def _match(self, scope: Scope) -> Optional[Route]:
        for route, rx in self.routes:
            if route.method == scope["method"] and rx.match(scope["path"]):
                return route
        return None

    async def __call__(self, scope: Scope, receive, send) -> None:
        route = self._match(scope) if scope["type"] == "http" else None
        if route is None:
            return await self.app(scope, receive, send)
        try:
            await self._handle(route, scope, receive, send)
        except Reject as rej:
            await _send_response(send, rej.response())
        except _Disconnected:
            pass  # the client left before its body arrived: nothing was claimed

    async def _tenant(self, route: Route, scope: Scope) -> str:
        hook = route.tenant or self.tenant
        if hook is None:
            return DEFAULTS["tenant"]
        value = hook(scope)
        if inspect.isawaitable(value):
            value = await value
        return value

    async def _handle(self, route: Route, scope: Scope, receive, send) -> None:
        # the tenant first: it is the application's auth, answered before anything about keys
        tenant = await self._tenant(route, scope)
        name = route.key_header.lower().encode("latin-1")
        values = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]
        header = ", ".join(values) if values else None
        key = parse_key(header)
        if header is None and route.key_required:
            return await _send_response(send, error_response("key_missing"))
        if header is not None and key is None:
            return await _send_response(send, error_response("key_invalid"))

        try:
            body = await _read_body(receive, route.max_body_bytes)
        except _TooLarge:
            return await _send_response(send, error_response("payload_too_large"))
        replayed = False

        async def app_receive() -> Message:
            # the app reads the body we already read; after it, disconnects come through
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if route.lease and key is not None:
            return await self._lease(route, scope, app_receive, send, tenant, key, body)
        return await self._transaction(route, scope, app_receive, send, tenant, key, body)

    async def _transaction(self, route, scope, receive, send, tenant, key, body) -> None:
        buffered = _Buffered()
        try:
            async with self.pool.connection() as conn:
                try:
                    claim = None
                    if key is not None:
                        cur = await conn.execute(route.sql_claim,
                                                 claim_params(route, tenant, key, body))
                        claim = Claim.from_row(await cur.fetchone())
                        early = outcome_response(route, claim)
                        if early is not None:
                            await conn.rollback()
                            return await _send_response(send, early)
                    ctx = IdemContext(conn, route, tenant, key, claim)
                    await self.app(_with_idem(scope, ctx), receive, buffered.send)
                    if buffered.status is None:
                        raise RuntimeError("the app returned without a response")
                    if not is_final(buffered.status):
                        await conn.rollback()
                    else:
                        if claim is not None:
                            await _complete(conn, route, tenant, claim.scoped_key, claim.fence,
                                            buffered)
                        await conn.commit()
                except BaseException:
                    await _rollback_quietly(conn)
                    raise
        except (psycopg.Error, IdemError) as exc:
            return await _send_error(send, route, exc)
        # committed (or rolled back for a non-final status): now the client may see it
        await buffered.flush(send)

    async def _lease(self, route, scope, receive, send, tenant, key, body) -> None:
        try:
            async with self.pool.connection() as conn:
                cur = await conn.execute(route.sql_claim, claim_params(route, tenant, key, body))
                claim = Claim.from_row(await cur.fetchone())
                early = outcome_response(route, claim)
                if early is not None:
                    await conn.rollback()
                    return await _send_response(send, early)
                # committed at once: durable, and others see a true Retry-After
                await conn.commit()
        except psycopg.Error as exc:
            return await _send_error(send, route, exc)

        ctx = LeaseContext(self.pool, route, tenant, key, claim)
        buffered = _Buffered()
        try:
            await self.app(_with_idem(scope, ctx), receive, buffered.send)
            if buffered.status is None:
                raise RuntimeError("the app returned without a response")
            if is_final(buffered.status):
                # in the handler's transaction if it opened one, else in a fresh one
                conn = await ctx.begin()
                await _complete(conn, route, tenant, ctx.scoped_key, ctx.fence, buffered)
                await ctx._finish(commit=True)
            else:
                await ctx._finish(commit=False)
                await ctx._release()
        except BaseException as exc:
            await ctx._finish(commit=False)
            from_db = isinstance(exc, (psycopg.Error, IdemError))
            if not (from_db and error_for_exception(exc).name == "lease_lost"):
                await ctx._release()
            if not from_db:
                raise  # the framework's error response
            return await _send_error(send, route, exc)
        await buffered.flush(send)


async def _complete(conn, route: Route, tenant: str, scoped_key: str, fence: int,
                    buffered: _Buffered) -> None:
    env = build_envelope(buffered.headers, bytes(buffered.body), route.stored_headers)
    await conn.execute(completion_statement(buffered.status),
                       params(tenant, scoped_key, fence, buffered.status, envelope_json(env)))


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
