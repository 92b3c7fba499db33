"""The reference app as a single-module Django project (CONTRACT.md "The reference apps").

    python -m pg_idem_http.reference.django_app --dsn postgresql://... --port 8000

Served threaded by Django's own WSGI server (as runserver does, without autoreload).
"""

from __future__ import annotations

import socketserver
import time

import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict

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
    tenant_from,
)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def database(dsn: str) -> dict:
    from ..django import pgbouncer_options

    params = conninfo_to_dict(dsn)
    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", None) or params.get("user", "postgres"),
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "CONN_MAX_AGE": 0,  # one thread per request: a kept connection would outlive its thread
    }
    entry.update(pgbouncer_options(params))  # the rest of the URI (sslmode, ...) as OPTIONS
    return entry


def configure(dsn: str) -> None:
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        # no CSRF: an API called by other services; CommonMiddleware sets Content-Length
        MIDDLEWARE=["django.middleware.common.CommonMiddleware"],
        INSTALLED_APPS=[],
        DATABASES={"default": database(dsn)},
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()


urlpatterns: list = []
fail_once = FailOnce()


def build_urls() -> None:
    from django.db import connection
    from django.http import HttpResponse
    from django.urls import path

    from ..django import idempotent
    from .common import routes

    payments_route, payouts_route = routes(lambda request: tenant_from(request.headers.get("X-Tenant")))
    options = lambda r: dict(  # noqa: E731
        tenant=r.tenant, lease=r.lease, statement_timeout_ms=r.statement_timeout_ms,
        idle_in_transaction_timeout_ms=r.idle_in_transaction_timeout_ms)

    @idempotent("POST", "/payments", **options(payments_route))
    def payments(request):
        if request.method != "POST":
            return HttpResponse(status=405)
        try:
            req = parse_body(request.body)
        except BadRequest as exc:
            return HttpResponse(bad_request_body(exc), status=400, content_type=JSON)
        idem, amount = request.idem, req["amount"]
        if req.get("fail") == "final":
            return HttpResponse(fill(APP["declined_json"], amount=amount), status=402,
                                content_type=JSON)
        with connection.cursor() as cur:  # in the claim's transaction
            cur.execute("INSERT INTO payments (tenant, idem_key, amount) VALUES (%s, %s, %s)"
                        " RETURNING id", (idem.tenant, idem.key, amount))
            (pid,) = cur.fetchone()
        if req.get("sleep_ms"):
            time.sleep(req["sleep_ms"] / 1000)  # holding the transaction
        if req.get("fail") == "transient" and fail_once.first(idem.tenant, idem.key):
            raise TransientFailure("injected transient failure")  # Django's 500
        if req.get("format") == "text":
            response = HttpResponse(fill(APP["payment_text"], id=pid, amount=amount),
                                    status=201, content_type=TEXT)
        else:
            response = HttpResponse(fill(APP["payment_json"], id=pid, amount=amount),
                                    status=201, content_type=JSON)
        response["Location"] = f"/payments/{pid}"
        return response

    @idempotent("POST", "/payouts", **options(payouts_route))
    def payouts(request):
        if request.method != "POST":
            return HttpResponse(status=405)
        try:
            req = parse_body(request.body)
        except BadRequest as exc:
            return HttpResponse(bad_request_body(exc), status=400, content_type=JSON)
        lease, amount = request.idem, req["amount"]
        bank_ref = lease.downstream_key("bank")
        if req.get("sleep_ms"):
            time.sleep(req["sleep_ms"] / 1000)  # the "external call": no transaction held
        conn = lease.begin()  # 55000 when another attempt took over: 409 lease_lost
        with conn.cursor() as cur:
            cur.execute("INSERT INTO payouts (tenant, idem_key, amount, attempt)"
                        " VALUES (%s, %s, %s, %s) RETURNING id",
                        (lease.tenant, lease.key, amount, lease.attempt))
            (pid,) = cur.fetchone()
        response = HttpResponse(fill(APP["payout_json"], id=pid, amount=amount,
                                     attempt=lease.attempt, bank_ref=bank_ref),
                                status=201, content_type=JSON)
        response["Location"] = f"/payouts/{pid}"
        return response

    urlpatterns[:] = [path("payments", payments), path("payouts", payouts)]


def create_tables() -> None:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cur:
        for ddl in TABLES:
            cur.execute(ddl)
    connection.close()


def main() -> None:
    opts = args("pg_idem reference app (Django)")
    configure(opts.dsn)
    build_urls()
    create_tables()

    from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer
    from django.core.wsgi import get_wsgi_application

    class ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    httpd = ThreadedServer(("127.0.0.1", opts.port), WSGIRequestHandler)
    httpd.set_app(get_wsgi_application())
    print(f"listening on http://127.0.0.1:{opts.port}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
