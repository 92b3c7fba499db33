"""The reference app as a single-module Django project (CONTRACT.md "The reference apps").

    python -m pg_idem_http.reference.django_app --dsn postgresql://... --port 8000

Served threaded by Django's own WSGI server (as runserver does, without autoreload).
"""

from __future__ import annotations

import json
import socketserver
import sys
import time
from typing import Optional

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


def tenant(request) -> Optional[str]:
    # the caller's account; None: the package answers 400 tenant_missing
    return request.headers.get("X-Tenant")


def build_urls() -> None:
    from django.db import connection
    from django.http import HttpResponse
    from django.urls import path

    from ..django import idempotent
    from ..observe import outcome_counts
    from .common import routes

    def options(route) -> dict:
        return dict(tenant=tenant, lease=route.lease, stored_headers=route.stored_headers,
                    statement_timeout_ms=route.statement_timeout_ms,
                    idle_in_transaction_timeout_ms=route.idle_in_transaction_timeout_ms)

    conf = routes()

    def insert_payment(idem, amount: int, order_id: Optional[int]) -> int:
        with connection.cursor() as cur:  # in the claim's transaction
            cur.execute("INSERT INTO public.payments (tenant, idem_key, amount, order_id)"
                        " VALUES (%s, %s, %s, %s) RETURNING id",
                        (idem.tenant, idem.key, amount, order_id))
            return cur.fetchone()[0]

    @idempotent("POST", conf["payments"].route, **options(conf["payments"]))
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
        pid = insert_payment(idem, amount, None)
        if req.get("sleep_ms"):
            time.sleep(req["sleep_ms"] / 1000)  # holding the transaction
        if req.get("fail") == "transient" and fail_once.first(idem.tenant, idem.key or ""):
            raise TransientFailure("injected transient failure")  # Django's 500
        if req.get("commit") == "api":
            connection.commit()  # refused inside the package's atomic block: Django's 500
        elif req.get("commit") == "sql":
            with connection.cursor() as cur:  # detected by the package: 500, nothing stored
                cur.execute("COMMIT")
        if req.get("format") == "text":
            response = HttpResponse(fill(APP["payment_text"], id=pid, amount=amount),
                                    status=201, content_type=TEXT)
        else:
            response = HttpResponse(fill(APP["payment_json"], id=pid, amount=amount),
                                    status=201, content_type=JSON)
        response["Location"] = f"/payments/{pid}"
        if req.get("set_cookie"):
            response["Set-Cookie"] = APP["cookie"]
        if req.get("links"):
            response["Link"] = ", ".join(APP["links"])  # Django sends one line per name
        return response

    @idempotent("POST", conf["orders"].route, **options(conf["orders"]))
    def order_pay(request, order_id: int):
        if request.method != "POST":
            return HttpResponse(status=405)
        try:
            req = parse_body(request.body)
        except BadRequest as exc:
            return HttpResponse(bad_request_body(exc), status=400, content_type=JSON)
        pid = insert_payment(request.idem, req["amount"], order_id)
        response = HttpResponse(fill(APP["payment_json"], id=pid, amount=req["amount"]),
                                status=201, content_type=JSON)
        response["Location"] = f"/payments/{pid}"
        return response

    def outcomes(request):
        return HttpResponse(json.dumps(outcome_counts()), content_type=JSON)

    @idempotent("POST", conf["payouts"].route, **options(conf["payouts"]))
    def payouts(request):
        if request.method != "POST":
            return HttpResponse(status=405)
        try:
            req = parse_body(request.body)
        except BadRequest as exc:
            return HttpResponse(bad_request_body(exc), status=400, content_type=JSON)
        lease, amount = request.idem, req["amount"]
        bank_ref = lease.downstream_key("bank")
        if req.get("heartbeat"):
            lease.heartbeat()  # by the route's lease
        if req.get("sleep_ms"):
            time.sleep(req["sleep_ms"] / 1000)  # the "external call": no transaction held
        conn = lease.begin()  # 55000 when another attempt took over: 409 lease_lost
        with conn.cursor() as cur:
            cur.execute("INSERT INTO public.payouts (tenant, idem_key, amount, attempt)"
                        " VALUES (%s, %s, %s, %s) RETURNING id",
                        (lease.tenant, lease.key, amount, lease.attempt))
            (pid,) = cur.fetchone()
        response = HttpResponse(fill(APP["payout_json"], id=pid, amount=amount,
                                     attempt=lease.attempt, bank_ref=bank_ref),
                                status=201, content_type=JSON)
        response["Location"] = f"/payouts/{pid}"
        return response

    # Django's converter <int:...> for the contract's {order_id}
    order_path = conf["orders"].route.lstrip("/").replace("{order_id}", "<int:order_id>")
    urlpatterns[:] = [path("payments", payments), path(order_path, order_pay),
                      path("payouts", payouts), path("_pg_idem/outcomes", outcomes)]


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
    from ..core import SetupError
    from ..django import check

    try:  # pg_idem's schema and version: refuse to start when it cannot be used
        check()
    except SetupError as exc:
        print(f"pg_idem reference app: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    from django.db import connections

    connections.close_all()  # each request's thread opens its own

    from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer
    from django.core.wsgi import get_wsgi_application

    class ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class RawUriHandler(WSGIRequestHandler):
        # the target as the client sent it (as gunicorn's RAW_URI): PATH_INFO is decoded
        def get_environ(self):
            environ = super().get_environ()
            environ["RAW_URI"] = self.path
            return environ

    httpd = ThreadedServer(("127.0.0.1", opts.port), RawUriHandler)
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
