"""The core's database calls, on a connection and transaction the caller owns.

The middleware and the decorator use these; so can an application that runs its own
transaction (SQLAlchemy's session, a psycopg transaction): locate once, then in one
transaction claim, make the writes, finish, commit.

    idem = await AsyncPgIdem.locate(conn)           # once per pool: schema and version
    claim = await idem.claim(conn, route, tenant, key, body, target)
    answer = outcome_response(route, claim)         # not None: ROLLBACK and send it
    ...                                             # the writes, in the same transaction
    await idem.finish(conn, route, tenant, claim, status, headers, body)  # before COMMIT

`finish` stores a final response (complete, or fail_final for a 4xx) and raises
TransactionEnded when it ran outside the claim's transaction. It does not commit.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

from .core import (
    CONTRACT,
    LOCATE,
    Claim,
    Route,
    SetupError,
    Statements,
    TransactionEnded,
    build_envelope,
    checked_version,
    claim_params,
    completion_params,
    envelope_json,
    is_final,
    located_schema,
    quote_ident,
)

__all__ = ["PgIdem", "AsyncPgIdem"]


def _not_there(schema: str, exc: BaseException) -> SetupError:
    # 42883: no idem_version(), which pg_idem has had since 0.6.0 (CONTRACT.md); else the schema
    # option names a schema without pg_idem, or a database error hid it
    # (Django wraps the driver's error: its sqlstate is on the cause)
    if "42883" in (getattr(exc, "sqlstate", None), getattr(exc.__cause__, "sqlstate", None)):
        return SetupError(f"pg_idem in schema {schema} has no idem_version(): it is older than"
                          f" {CONTRACT['min_pg_idem_version']}, which this package needs: ALTER"
                          " EXTENSION pg_idem UPDATE (or install a newer SQL edition)")
    return SetupError(f"pg_idem's idem_version() cannot be called in schema {schema}: {exc}")


class PgIdem:
    """Sync: runs on anything with a DB-API cursor() (psycopg's Connection, Django's)."""

    def __init__(self, statements: Statements, version: str) -> None:
        self.sql, self.version = statements, version

    @classmethod
    def locate(cls, conn: Any, schema: Optional[str] = None) -> "PgIdem":
        """Find pg_idem's schema (sql.locate, or the schema given) and check its version;
        SetupError when it cannot be used. Runs in the connection's current transaction."""
        with conn.cursor() as cur:
            if schema is None:
                cur.execute(LOCATE)
                found = located_schema(cur.fetchone())
            else:
                found = quote_ident(schema)
            statements = Statements(found)
            try:
                cur.execute(statements.version)
            except Exception as exc:
                raise _not_there(found, exc) from exc
            return cls(statements, checked_version(cur.fetchone()[0]))

    def claim(self, conn: Any, route: Route, tenant: str, key: str, body: bytes,
              target: str) -> Claim:
        with conn.cursor() as cur:
            cur.execute(self.sql.claim(route), claim_params(route, tenant, key, body, target))
            return Claim.from_row(cur.fetchone())

    def finish(self, conn: Any, route: Route, tenant: str, claim: Claim, status: int,
               headers: Iterable[Tuple[str, str]], body: bytes) -> None:
        """Store a final response in the claim's transaction (the caller then commits)."""
        if not is_final(status):
            raise ValueError(f"{status} is not final: roll back instead")
        env = envelope_json(build_envelope(headers, body, route.stored_headers))
        with conn.cursor() as cur:
            cur.execute(self.sql.completion(status), completion_params(tenant, claim, status, env))
            if cur.fetchone() is None:
                raise TransactionEnded(f"{claim.scoped_key}: the claim's transaction ended")


class AsyncPgIdem:
    """Async: runs on a psycopg AsyncConnection (also the driver connection under SQLAlchemy)."""

    def __init__(self, statements: Statements, version: str) -> None:
        self.sql, self.version = statements, version

    @classmethod
    async def locate(cls, conn: Any, schema: Optional[str] = None) -> "AsyncPgIdem":
        """As PgIdem.locate, on an AsyncConnection."""
        if schema is None:
            cur = await conn.execute(LOCATE)
            found = located_schema(await cur.fetchone())
        else:
            found = quote_ident(schema)
        statements = Statements(found)
        try:
            cur = await conn.execute(statements.version)
        except Exception as exc:
            raise _not_there(found, exc) from exc
        return cls(statements, checked_version((await cur.fetchone())[0]))

    async def claim(self, conn: Any, route: Route, tenant: str, key: str, body: bytes,
                    target: str) -> Claim:
        cur = await conn.execute(self.sql.claim(route),
                                 claim_params(route, tenant, key, body, target))
        return Claim.from_row(await cur.fetchone())

    async def finish(self, conn: Any, route: Route, tenant: str, claim: Claim, status: int,
                     headers: Iterable[Tuple[str, str]], body: bytes) -> None:
        """Store a final response in the claim's transaction (the caller then commits)."""
        if not is_final(status):
            raise ValueError(f"{status} is not final: roll back instead")
        env = envelope_json(build_envelope(headers, body, route.stored_headers))
        cur = await conn.execute(self.sql.completion(status),
                                 completion_params(tenant, claim, status, env))
        if await cur.fetchone() is None:
            raise TransactionEnded(f"{claim.scoped_key}: the claim's transaction ended")
