"""Every package README's quick start, run as pasted with this checkout's packages
(quickstart.py: written to a directory of its own, started as the package's user would start
it, asked for one payment twice: 201, then the same bytes replayed), each against a fresh
database with pg_idem (native). clients/release-check.sh runs the same quick starts with the
released artifacts."""

import uuid

import psycopg
import pytest
from conftest import MODES, ROOT, dsn_of
from quickstart import TABLES, quickstarts, run


def test_every_quick_start_is_marked():
    assert sorted(quickstarts()) == sorted(TABLES)


def test_the_rust_quick_start_is_the_example_that_is_built():
    assert quickstarts()["axum"]["main.rs"] == (ROOT / "clients/rust/examples/quickstart.rs").read_text()


def test_the_go_quick_start_is_the_example_that_is_built():
    example = ROOT / "clients/go/reference/examples/quickstart/main.go"
    assert quickstarts()["nethttp"]["main.go"] == example.read_text()


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


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_quick_start_runs_as_pasted(name, database, tmp_path):
    run(name, database, tmp_path)
