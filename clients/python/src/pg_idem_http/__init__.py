"""pg-idem-http: exactly-once HTTP endpoints on PostgreSQL with pg_idem.

The framework-free core is importable without any framework; the drivers live in
pg_idem_http.asgi (FastAPI/Starlette), pg_idem_http.fastapi (dependencies) and
pg_idem_http.django (decorator).
"""

from .core import (
    CONTRACT,
    Claim,
    IdemError,
    Reject,
    Route,
    build_envelope,
    error_body,
    error_name_for_sqlstate,
    error_response,
    is_final,
    parse_key,
    replay,
)

__version__ = "0.1.0"
__all__ = [
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
