"""pg-idem-http: exactly-once HTTP endpoints on PostgreSQL with pg_idem.

The framework-free core is importable without any framework; the drivers live in
pg_idem_http.asgi (FastAPI/Starlette), pg_idem_http.fastapi (dependencies) and
pg_idem_http.django (decorator). pg_idem_http.db claims and completes on a connection the
application owns (bring your own transaction).
"""

from importlib import metadata as _metadata

from .core import (
    CONTRACT,
    Claim,
    IdemError,
    Reject,
    Route,
    SetupError,
    TransactionEnded,
    build_envelope,
    error_body,
    error_for_exception,
    error_name_for_sqlstate,
    error_response,
    is_final,
    outcome_response,
    parse_key,
    replay,
    request_target,
)
from .db import AsyncPgIdem, PgIdem
from .observe import outcome_counts

# pyproject.toml is the version's one source: an installed package (wheel, sdist or editable)
# carries it in its metadata
__version__ = _metadata.version("pg-idem-http")
__all__ = [
    "AsyncPgIdem",
    "PgIdem",
    "SetupError",
    "TransactionEnded",
    "error_for_exception",
    "outcome_counts",
    "outcome_response",
    "request_target",
    "CONTRACT",
    "Claim",
    "IdemError",
    "Reject",
    "Route",
    "build_envelope",
    "error_body",
    "error_name_for_sqlstate",
    "error_response",
    "is_final",
    "parse_key",
    "replay",
]
