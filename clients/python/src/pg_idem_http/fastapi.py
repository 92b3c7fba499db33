"""FastAPI glue: the middleware, and a dependency that hands a handler its claim.

    @app.post("/payments")
    async def pay(idem: Idem): ...            # idem.conn: the claim's transaction
    @app.post("/payouts")
    async def payout(lease: Lease): ...       # lease mode: fence, downstream_key(), begin(), ...
"""

from __future__ import annotations

from typing import Annotated, Union

from fastapi import Depends, Request

from .asgi import IdemContext, IdempotencyMiddleware, LeaseContext
from .core import Reject, Route

__all__ = ["Idem", "Lease", "get_idem", "IdempotencyMiddleware", "Route", "Reject"]


# async: FastAPI runs a plain `def` dependency in its thread pool, a thread hand-off per request
async def get_idem(request: Request) -> Union[IdemContext, LeaseContext]:
    try:
        return request.state.idem
    except AttributeError:
        # the route is not configured in IdempotencyMiddleware(routes=...): a setup error
        raise RuntimeError(
            f"{request.method} {request.url.path} has no pg_idem route; add a Route for it"
        ) from None


Idem = Annotated[IdemContext, Depends(get_idem)]
Lease = Annotated[LeaseContext, Depends(get_idem)]
