#!/usr/bin/env python3
"""Runs one package README's quick start as pasted: the blocks marked
`<!-- quickstart: NAME FILE -->` are written to FILE in a directory, started as the package's
user would start them, against a database with pg_idem, and asked for one payment twice: 201,
then the same bytes replayed with `Idempotent-Replayed: true`.

Where the package comes from is the caller's: this checkout's packages
(clients/conformance/test_quickstarts.py) or the released artifacts installed in a clean place
(clients/release-check.sh). --package names it, per quick start:

    fastapi, django    a Python interpreter with the package and the quick start's dependencies
    express, fastify   a node_modules directory holding pg-idem-http and its peers
    servlet            the package's jar (Debian's Tomcat and PgJDBC jars beside it)
    axum               the quick start's executable, built from the crate
    nethttp            the Go module's directory (clients/go/run-quickstart.sh builds against it)

What a reader must do besides pasting is only what TABLES says and the environment run() sets:
DATABASE_URL (Django: the PG* variables), PORT, and the quick start's table. Standard library
only (and psql for the table), so any python3 runs it:

    clients/conformance/quickstart.py NAME DSN WORKDIR [--package WHERE]
"""

import argparse
import http.client
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"
DEFAULTS = json.loads((CLIENTS / "contract.json").read_text())["defaults"]
MARK = re.compile(r"<!-- quickstart: (\w+) ([\w./]+) -->\n```[^\n]*\n(.*?)```", re.S)
PAYMENTS = "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)"
ORDERS_PAYMENTS = "CREATE TABLE payments (id bigserial PRIMARY KEY, order_id bigint, idem_key text)"
# name -> (the table the quick start expects, the route it serves)
TABLES = {
    "fastapi": (ORDERS_PAYMENTS, "/orders/7/pay"),
    "django": (ORDERS_PAYMENTS, "/orders/7/pay"),
    "express": (PAYMENTS, "/payments"),
    "fastify": (PAYMENTS, "/payments"),
    "servlet": (PAYMENTS, "/payments"),
    "axum": ("CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text, body text)", "/orders"),
    "nethttp": (PAYMENTS, "/payments"),
}
# what the servlet quick start runs beside the package's jar (clients/java/setup.sh installs them)
JAVA_JARS = [f"/usr/share/java/{jar}.jar" for jar in ("tomcat10-embed-core", "jakarta-annotation-api", "postgresql")]


def quickstarts():
    """name -> {file: code}, from every package README."""
    found = {}
    for readme in sorted(CLIENTS.glob("*/README.md")):
        for name, file, code in MARK.findall(readme.read_text()):
            found.setdefault(name, {})[file] = code
    return found


def checkout_jar():
    pom = (CLIENTS / "java" / "pom.xml").read_text()
    version = re.search(r"^  <version>(.*)</version>", pom, re.M).group(1)
    return str(CLIENTS / "java" / "build" / f"pg-idem-http-{version}.jar")


def command(name, package, workdir):
    """The argv that starts quick start NAME with the package from PACKAGE (None: this
    checkout's), and what its environment needs; links node_modules into WORKDIR for Node.js."""
    if package is not None and not os.path.exists(package):
        # never this checkout's package in place of a missing one
        raise AssertionError(f"--package {package!r} does not exist")
    if name in ("fastapi", "django"):
        python = package or str(CLIENTS / "python" / ".venv" / "bin" / "python")
        if name == "fastapi":
            return [python, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "{port}"], {}
        return [python, "-m", "django", "runserver", "--noreload", "127.0.0.1:{port}"], {}
    if name in ("express", "fastify"):
        # as after `npm install pg-idem-http pg express fastify`
        modules = workdir / "node_modules"
        if package:
            modules.symlink_to(pathlib.Path(package).resolve())
            return ["node", "app.js"], {"NODE_PATH": ""}
        modules.mkdir()
        (modules / "pg-idem-http").symlink_to(CLIENTS / "node")
        return ["node", "app.js"], {"NODE_PATH": str(CLIENTS / "node" / "node_modules")}
    if name == "servlet":
        # java's source-file mode compiles and runs App.java
        return ["java", "-cp", ":".join([package or checkout_jar()] + JAVA_JARS), "App.java"], {}
    if name == "axum":
        return [package or str(ROOT / "target" / "debug" / "examples" / "quickstart")], {}
    if name == "nethttp":
        # writes a go.mod (the module, Debian's lib/pq and chi: no Go proxy here), builds, runs
        return [str(CLIENTS / "go" / "run-quickstart.sh"), package or str(CLIENTS / "go")], {}
    raise ValueError(f"no quick start named {name}")


def post(port, route, key):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", route, body=b'{"amount": 5}', headers={
            "Content-Type": "application/json", DEFAULTS["key_header"]: key, "X-Tenant": "acme"})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name, dsn, workdir, package=None):
    """Creates the quick start's table in DSN's database, writes its files into WORKDIR, starts
    it and checks the replay; raises AssertionError (with the app's output) when it fails."""
    workdir = pathlib.Path(workdir)
    table, route = TABLES[name]
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", table], check=True)
    for file, code in quickstarts()[name].items():
        (workdir / file).write_text(code)
    argv, extra = command(name, package, workdir)
    port = free_port()
    url = urllib.parse.urlsplit(dsn)
    env = dict(os.environ, DATABASE_URL=dsn, PORT=str(port), DJANGO_SETTINGS_MODULE="settings",
               PYTHONPATH=str(workdir), PGHOST=url.hostname, PGPORT=str(url.port),
               PGUSER=url.username, PGDATABASE=url.path.lstrip("/"), **extra)
    log_path = workdir / "log"
    replay = DEFAULTS["replay_header"].lower()
    with log_path.open("wb") as log:
        proc = subprocess.Popen([a.replace("{port}", str(port)) for a in argv], cwd=workdir, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{log_path.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{name} did not listen in 60 s:\n{log_path.read_text()}"
                time.sleep(0.1)
        key = str(uuid.uuid4())
        first = post(port, route, key)
        assert first[0] == 201 and replay not in first[1], (first, log_path.read_text())
        again = post(port, route, key)
        assert (again[0], again[2], again[1].get(replay)) == (201, first[2], "true"), (first, again)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if (workdir / "node_modules").is_symlink():
            (workdir / "node_modules").unlink()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(TABLES))
    parser.add_argument("dsn", help="a database with pg_idem (the extension or its SQL edition)")
    parser.add_argument("workdir", help="an empty directory for the quick start's files")
    parser.add_argument("--package", help="where the package comes from (see above); default: this checkout")
    args = parser.parse_args()
    try:
        run(args.name, args.dsn, args.workdir, args.package)
    except AssertionError as e:
        print(f"quickstart {args.name}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
