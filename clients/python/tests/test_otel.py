"""OpenTelemetry (extra `otel`): the request's span carries its outcome, and the counter
pg_idem.outcomes counts each one, through the SDK's in-memory exporter and reader."""

from __future__ import annotations

import uuid

import pytest

trace = pytest.importorskip("opentelemetry.trace")
metrics = pytest.importorskip("opentelemetry.metrics")
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from conftest import AsgiServer  # noqa: E402
from test_asgi_http import make_app, post  # noqa: E402

SPANS = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def providers():
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(SPANS))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


def counted():
    out = {}
    data = READER.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "pg_idem.outcomes":
                    for point in metric.data.data_points:
                        name = point.attributes["pg_idem.outcome"]
                        out[name] = out.get(name, 0) + point.value
    return out


def test_spans_and_the_outcome_counter(dsn):
    before = counted()
    with AsgiServer(dsn, make_app()) as srv:
        assert srv.running
        key = str(uuid.uuid4())
        assert post(srv, "/pay/otel", key).status_code == 201
        assert post(srv, "/pay/otel", key).status_code == 201
    spans = [s for s in SPANS.get_finished_spans() if s.name == "pg_idem POST /pay/{name}"]
    assert [s.attributes["pg_idem.outcome"] for s in spans[-2:]] == ["stored", "replayed"]
    after = counted()
    for name in ("claimed", "stored", "replayed"):
        assert after.get(name, 0) == before.get(name, 0) + 1, (before, after)
