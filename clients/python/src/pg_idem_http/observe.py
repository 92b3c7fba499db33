"""Every request's outcome (contract.json `outcomes`): counted, logged, and traced.

The counts are the process's, for every route of every driver: `outcome_counts()` returns each
name of the contract with its count. Each outcome is logged on the `pg_idem_http` logger
(`transaction_ended` and `database_error` as errors, the rest at DEBUG) and, when the
`opentelemetry` API is importable (extra `otel`), counted on the metric `pg_idem.outcomes`
(attribute `pg_idem.outcome`) and set on the request's span `pg_idem <METHOD> <route>`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Dict, Iterator, Optional

from .core import CONTRACT

log = logging.getLogger("pg_idem_http")

OUTCOMES = tuple(CONTRACT["outcomes"])
_ERRORS = {"transaction_ended", "database_error"}
_lock = threading.Lock()
_counts: Dict[str, int] = dict.fromkeys(OUTCOMES, 0)

try:  # optional: the otel extra
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    _metrics = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

_counter: Any = None


def _otel_counter() -> Any:
    # created on first use: an SDK's MeterProvider is usually set after this module is imported
    global _counter
    if _counter is None and _metrics is not None:
        _counter = _metrics.get_meter("pg_idem_http").create_counter(
            "pg_idem.outcomes", description="pg_idem requests by outcome")
    return _counter


def outcome_counts() -> Dict[str, int]:
    """Every outcome name of the contract with how many requests of this process ended so."""
    with _lock:
        return dict(_counts)


def record(outcome: str, route: Any = None, **details: Any) -> None:
    """Count one outcome and report it (logging; OpenTelemetry when installed)."""
    if outcome not in _counts:
        raise ValueError(f"not an outcome of the contract: {outcome}")
    with _lock:
        _counts[outcome] += 1
    level = logging.ERROR if outcome in _ERRORS else logging.DEBUG
    if log.isEnabledFor(level):  # the message is built only when someone reads it
        where = f"{route.method} {route.route}" if route is not None else "-"
        exc = details.pop("exc", None)
        log.log(level, "pg_idem %s: %s %s", outcome, where,
                " ".join(f"{k}={v}" for k, v in details.items()), exc_info=exc)
    counter = _otel_counter()
    if counter is not None:
        attrs = {"pg_idem.outcome": outcome}
        if route is not None:
            attrs["http.route"] = route.route
        counter.add(1, attrs)
    if _trace is not None:
        span = _trace.get_current_span()
        if span.is_recording():
            span.add_event("pg_idem." + outcome)
            span.set_attribute("pg_idem.outcome", outcome)


@contextlib.contextmanager
def request_span(route: Any) -> Iterator[Optional[Any]]:
    """The span of one request through pg_idem (a no-op without OpenTelemetry)."""
    if _trace is None:
        yield None
        return
    tracer = _trace.get_tracer("pg_idem_http")
    with tracer.start_as_current_span(f"pg_idem {route.method} {route.route}",
                                      attributes={"http.route": route.route}) as span:
        yield span
