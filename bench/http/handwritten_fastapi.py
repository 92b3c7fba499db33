"""POST /payments with the glue written by hand (what a team writes without the package): the
same claim, insert and completion as clients/python's reference app, for bench/runners/http_middleware.py.

    python handwritten_fastapi.py --dsn DSN --port PORT
"""

import argparse
import json

import uvicorn
from fastapi import FastAPI, Request, Response
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

parser = argparse.ArgumentParser()
parser.add_argument("--dsn", required=True)
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()

pool = AsyncConnectionPool(args.dsn, min_size=4, max_size=10, open=False, kwargs={"prepare_threshold": None})
app = FastAPI()


@app.on_event("startup")
async def start():
    await pool.open(wait=True)


def reply(status, body, headers=None):
    return Response(json.dumps(body, separators=(",", ":")), status, headers, media_type="application/json")


@app.post("/payments")
async def payments(request: Request):
    key, tenant = request.headers.get("idempotency-key"), request.headers.get("x-tenant")
    if not key or not tenant:
        return reply(400, {"error": "key_missing"})
    raw = await request.body()
    amount = json.loads(raw)["amount"]
    async with pool.connection() as conn:
        async with conn.transaction():
            cur = await conn.execute(
                "SELECT outcome, fence, response_code, response_body FROM idem_claim(%s, %s,"
                " idem_request_hash('POST', '/payments', %s::jsonb))",
                (tenant, key, raw.decode()),
            )
            outcome, fence, code, stored = await cur.fetchone()
            if outcome in ("completed", "failed"):
                return reply(code, stored, {"Idempotent-Replayed": "true"})
            if outcome == "in_progress":
                return reply(409, {"error": "in_progress"}, {"Retry-After": "1"})
            if outcome != "claimed":
                return reply(422, {"error": outcome})
            cur = await conn.execute(
                "INSERT INTO payments (tenant, idem_key, amount) VALUES (%s, %s, %s) RETURNING id",
                (tenant, key, amount),
            )
            (pid,) = await cur.fetchone()
            body = {"id": pid, "amount": amount, "currency": "EUR", "status": "succeeded"}
            await conn.execute("SELECT idem_complete(%s, %s, %s, 201, %s)", (tenant, key, fence, Jsonb(body)))
    return reply(201, body, {"Location": f"/payments/{pid}"})


if __name__ == "__main__":
    print(f"listening on http://127.0.0.1:{args.port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
