"""The reference app on FastAPI + uvicorn (CONTRACT.md "The reference apps").

    python -m pg_idem_http.reference.fastapi_app --dsn postgresql://... --port 8000
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Optional

import uvicorn
from fastapi import FastAPI, Request, Response
from psycopg_pool import AsyncConnectionPool

from ..asgi import check
from ..core import SetupError
from ..fastapi import Idem, IdempotencyMiddleware, Lease
from ..observe import outcome_counts
from .common import (
    APP,
    TABLES,
    BadRequest,
    FailOnce,
    TransientFailure,
    args,
    bad_request_body,
    fill,
    parse_body,
    routes,
)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def tenant(scope) -> Optional[str]:
    # the caller's account; None: the package answers 400 tenant_missing
    for name, value in scope["headers"]:  # ASGI header names are lower-case bytes
        if name == b"x-tenant":
            return value.decode("latin-1")
    return None


async def returning_id(conn, sql: str, values: tuple) -> int:
    cur = await conn.execute(sql, values)
    row = await cur.fetchone()
    assert row is not None  # INSERT ... RETURNING id: one row
    return row[0]


async def insert_payment(idem, amount: int, order_id: Optional[int]) -> int:
    return await returning_id(
        idem.conn, "INSERT INTO public.payments (tenant, idem_key, amount, order_id)"
        " VALUES (%s, %s, %s, %s) RETURNING id", (idem.tenant, idem.key, amount, order_id))


def create_app(pool: AsyncConnectionPool) -> FastAPI:
    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, pool=pool, tenant=tenant,
                       routes=list(routes().values()))
    fail_once = FailOnce()

    async def pay(request: Request, idem: Idem, order_id: Optional[int] = None) -> Response:
        try:
            req = parse_body(await request.body())
        except BadRequest as exc:
            return Response(bad_request_body(exc), 400, media_type=JSON)
        amount = req["amount"]
        if req.get("fail") == "final":
            return Response(fill(APP["declined_json"], amount=amount), 402, media_type=JSON)
        pid = await insert_payment(idem, amount, order_id)
        if req.get("sleep_ms"):
            await asyncio.sleep(req["sleep_ms"] / 1000)  # holding the transaction, not the loop
        if req.get("fail") == "transient" and fail_once.first(idem.tenant, idem.key or ""):
            raise TransientFailure("injected transient failure")  # the framework's 500
        if req.get("commit") == "api":
            await idem.conn.commit()  # refused by the package: the framework's 500
        elif req.get("commit") == "sql":
            await idem.conn.execute("COMMIT")  # detected by the package: 500, nothing stored
        if req.get("format") == "text":
            body, media = fill(APP["payment_text"], id=pid, amount=amount), TEXT
        else:
            body, media = fill(APP["payment_json"], id=pid, amount=amount), JSON
        response = Response(body, 201, media_type=media,
                            headers={"Location": f"/payments/{pid}"})
        if req.get("set_cookie"):
            response.raw_headers.append((b"set-cookie", APP["cookie"].encode()))
        if req.get("links"):
            for link in APP["links"]:  # one header line per value, in order
                response.raw_headers.append((b"link", link.encode()))
        return response

    @app.post("/payments")
    async def payments(request: Request, idem: Idem) -> Response:
        return await pay(request, idem)

    @app.post(APP["order_route"])
    async def order_pay(order_id: int, request: Request, idem: Idem) -> Response:
        try:
            req = parse_body(await request.body())
        except BadRequest as exc:
            return Response(bad_request_body(exc), 400, media_type=JSON)
        pid = await insert_payment(idem, req["amount"], order_id)
        return Response(fill(APP["payment_json"], id=pid, amount=req["amount"]), 201,
                        media_type=JSON, headers={"Location": f"/payments/{pid}"})

    @app.get("/_pg_idem/outcomes")
    async def outcomes() -> Response:
        return Response(json.dumps(outcome_counts()), 200, media_type=JSON)

    @app.post("/payouts")
    async def payouts(request: Request, lease: Lease) -> Response:
        try:
            req = parse_body(await request.body())
        except BadRequest as exc:
            return Response(bad_request_body(exc), 400, media_type=JSON)
        amount = req["amount"]
        bank_ref = await lease.downstream_key("bank")
        if req.get("heartbeat"):
            await lease.heartbeat()  # by the route's lease
        if req.get("sleep_ms"):
            await asyncio.sleep(req["sleep_ms"] / 1000)  # the "external call": no transaction
        conn = await lease.begin()  # 55000 here when another attempt took over: 409 lease_lost
        pid = await returning_id(
            conn, "INSERT INTO public.payouts (tenant, idem_key, amount, attempt)"
            " VALUES (%s, %s, %s, %s) RETURNING id",
            (lease.tenant, lease.key, amount, lease.attempt))
        body = fill(APP["payout_json"], id=pid, amount=amount, attempt=lease.attempt,
                    bank_ref=bank_ref)
        return Response(body, 201, media_type=JSON, headers={"Location": f"/payouts/{pid}"})

    return app


async def main() -> None:
    opts = args("pg_idem reference app (FastAPI)")
    # prepare_threshold=None: no named server-side prepared statements (PgBouncer)
    pool = AsyncConnectionPool(opts.dsn, min_size=2, max_size=20, timeout=10, open=False,
                               kwargs={"prepare_threshold": None})
    await pool.open(wait=True, timeout=30)
    try:  # pg_idem's schema and version: refuse to start when it cannot be used
        await check(pool)
    except SetupError as exc:
        print(f"pg_idem reference app: {exc}", file=sys.stderr, flush=True)
        await pool.close()
        sys.exit(1)
    async with pool.connection() as conn:
        for ddl in TABLES:
            await conn.execute(ddl)
    config = uvicorn.Config(create_app(pool), host="127.0.0.1", port=opts.port,
                            log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        print(f"listening on http://127.0.0.1:{opts.port}", flush=True)
    try:
        await task
    finally:
        await pool.close()
    if not server.started:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
