"""Every package README's quick start, run as pasted: the blocks marked
`<!-- quickstart: NAME FILE -->` are written to FILE in a directory of their own, started as the
package's user would start them (below), against a fresh database with pg_idem (native), and
asked for one payment twice: 201, then the same bytes replayed.

What a reader must do besides pasting is only what RUN and SETUP below say: set DATABASE_URL
(Django: the PG* variables) and PORT, and create the quick start's table."""

import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import uuid

import psycopg
import pytest
from conftest import MODES, ROOT, dsn_of
from test_http import REPLAY, post

PY = str(ROOT / "clients" / "python" / ".venv" / "bin" / "python")
# name -> (argv, SQL the quick start expects to exist, the route to call)
RUN = {
    "fastapi": ([PY, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "{port}"],
                "CREATE TABLE payments (id bigserial PRIMARY KEY, order_id bigint, idem_key text)",
                "/orders/7/pay"),
    "django": ([PY, "-m", "django", "runserver", "--noreload", "127.0.0.1:{port}"],
               "CREATE TABLE payments (id bigserial PRIMARY KEY, order_id bigint, idem_key text)",
               "/orders/7/pay"),
    "express": (["node", "app.js"],
                "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)",
                "/payments"),
    "fastify": (["node", "app.js"],
                "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)",
                "/payments"),
    # java's source-file mode compiles and runs App.java; the jars as clients/java/setup.sh leaves them
    "servlet": (["java", "-cp", ":".join([str(ROOT / "clients/java/build/pg-idem-http-0.1.0.jar")] + [
                    f"/usr/share/java/{jar}.jar" for jar in
                    ("tomcat10-embed-core", "jakarta-annotation-api", "postgresql")]), "App.java"],
                "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)",
                "/payments"),
    "axum": ([str(ROOT / "target" / "debug" / "examples" / "quickstart")],
             "CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text, body text)",
             "/orders"),
}
MARK = re.compile(r"<!-- quickstart: (\w+) ([\w./]+) -->\n```[^\n]*\n(.*?)```", re.S)


def quickstarts():
    found = {}
    for readme in sorted((ROOT / "clients").glob("*/README.md")):
        for name, file, code in MARK.findall(readme.read_text()):
            found.setdefault(name, {})[file] = code
    return found


def test_every_quick_start_is_marked():
    assert sorted(quickstarts()) == sorted(RUN)


def test_the_rust_quick_start_is_the_example_that_is_built():
    assert quickstarts()["axum"]["main.rs"] == (ROOT / "clients/rust/examples/quickstart.rs").read_text()


@pytest.fixture
def database():
    """A database of its own with pg_idem, on the native server."""
    if "native" not in MODES:
        pytest.skip("the quick starts run against the native server (--mode native)")
    admin = dsn_of("native")
    name = f"qs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = admin.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_idem")
    yield dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.parametrize("name", sorted(RUN))
def test_the_quick_start_runs_as_pasted(name, database, tmp_path):
    argv, setup, route = RUN[name]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(setup)
    for file, code in quickstarts()[name].items():
        (tmp_path / file).write_text(code)
    # as after `npm install pg-idem-http pg express fastify`: the package and its neighbours
    modules = tmp_path / "node_modules"
    modules.mkdir()
    (modules / "pg-idem-http").symlink_to(ROOT / "clients" / "node")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    info = psycopg.conninfo.conninfo_to_dict(database)
    env = dict(os.environ, DATABASE_URL=database, PORT=str(port), DJANGO_SETTINGS_MODULE="settings",
               PYTHONPATH=str(tmp_path), NODE_PATH=str(ROOT / "clients" / "node" / "node_modules"),
               PGHOST=info["host"], PGPORT=str(info["port"]), PGUSER=info["user"], PGDATABASE=info["dbname"])
    log = (tmp_path / "log").open("wb")
    proc = subprocess.Popen([a.replace("{port}", str(port)) for a in argv], cwd=tmp_path, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "log").read_text()
                time.sleep(0.1)

        class App:
            pass

        app = App()
        app.port = port
        key = str(uuid.uuid4())
        first = post(app, route, {"amount": 5}, key, "acme")
        assert first.status == 201 and REPLAY not in first.headers, (first, (tmp_path / "log").read_text())
        again = post(app, route, {"amount": 5}, key, "acme")
        assert (again.status, again.body, again.headers.get(REPLAY)) == (201, first.body, "true")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp_path / "node_modules", ignore_errors=True)
