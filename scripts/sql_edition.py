#!/usr/bin/env python3
"""Builds pg_idem's SQL edition: the same objects CREATE EXTENSION pg_idem creates, with every
C function replaced by its SQL or PL/pgSQL body, for servers that cannot load pg_idem's library
(managed PostgreSQL). Nothing is declared twice: the declarations (names, arguments, defaults,
result types, comments, grants) are read from the native edition's sql/*.sql in the order
src/lib.rs loads them; only the bodies come from sql/edition/.

    scripts/sql_edition.py [--out DIR]     (default target/sql-edition)

writes
    pg_idem--<version>.sql        the plain install: psql -1 -f it (or give it to a migration
                                  tool) in a database as the role that will own pg_idem
    pg_idem--<version>.tle.sql    the pg_tle package: registers the same script with
                                  pgtle.install_extension, after which CREATE EXTENSION pg_idem
                                  works as usual (RDS, Aurora, Supabase)

A function `sym` declared `LANGUAGE c ... AS 'MODULE_PATHNAME', 'sym'` gets the body in
sql/edition/functions/sym.sql. Its first line may say `-- language: sql` (default plpgsql).
Every such function becomes SECURITY DEFINER with search_path pinned to pg_catalog, pg_temp:
it runs as pg_idem's owner (who alone may touch idem.*), as the native functions switch to the
owner for whatever they run through SQL. The build fails when a body is missing or unused.
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
EDITION = ROOT / "sql" / "edition"
# files of sql/edition/ with the edition's own internals (schema idem): those whose types the
# function bodies declare variables of come right after the native schema.sql (PL/pgSQL checks
# a body's variable types when the function is created); the rules come last, after the
# native declarations, so that they use the declared result types (idem_claim_result) instead
# of a copy
INTERNALS_FIRST = ["settings.sql", "hashing.sql", "statistics.sql"]
INTERNALS_LAST = ["rules.sql"]
# Functions declared PARALLEL SAFE natively whose SQL body is not: its tenant check runs a
# subtransaction (idem.in_restricted_operation), which a parallel worker may not start. The
# native function fails there too with tenant grants on (XX000: its fresh snapshot), a known
# bug; its declaration changes with the release that fixes it (a Citus cluster's update cannot
# ALTER a distributed function inside ALTER EXTENSION UPDATE).
PARALLEL_UNSAFE_HERE = {"idem_watermark_wrapper"}
# dollar tags a body may not contain: the function's own and pg_tle's wrapper's
BODY_TAG = "$pg_idem$"
TLE_TAG = "$_pg_idem_tle_$"
PG_TLE_RESERVED = ("$_pgtle_o_$", "$_pgtle_i_$")

C_FUNCTION = re.compile(
    r"LANGUAGE\s+c\b(?P<attrs>[^;]*?)\s*AS\s+'MODULE_PATHNAME',\s*'(?P<sym>\w+)'\s*;",
    re.IGNORECASE | re.DOTALL,
)


def fail(message):
    sys.exit(f"sql_edition: {message}")


def version():
    text = (ROOT / "Cargo.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
    if not match:
        fail("no version in Cargo.toml")
    return match.group(1)


def native_files():
    """The sql/*.sql files in the order src/lib.rs loads them (extension_sql_file!)."""
    lib = (ROOT / "src" / "lib.rs").read_text()
    names = re.findall(r'extension_sql_file!\(\s*"\.\./sql/([\w.]+)"', lib)
    if not names or names[0] != "schema.sql":
        fail("src/lib.rs does not load sql/schema.sql first")
    return names


def body_of(sym, function, used):
    path = EDITION / "functions" / f"{sym}.sql"
    if not path.exists():
        fail(f"{path.relative_to(ROOT)} is missing: every C function needs its SQL body")
    used.add(path.name)
    text = path.read_text().strip("\n")
    language = "plpgsql"
    first = text.splitlines()[0] if text else ""
    absent = re.match(r"--\s*absent:\s*(.+)$", first)
    if absent:
        # a function this edition cannot provide: it exists, so that the declarations stay one,
        # and says why with 0A000 (the README's table of differences lists each)
        reason = absent.group(1).strip().replace("'", "''")
        return "plpgsql", (
            "BEGIN\n"
            "    RAISE EXCEPTION USING\n"
            "        ERRCODE = 'feature_not_supported',\n"
            f"        MESSAGE = '{function}() is not available in pg_idem''s SQL edition',\n"
            f"        DETAIL = '{reason}',\n"
            "        HINT = 'Use the native edition (CREATE EXTENSION pg_idem with its library) for this function.';\n"
            "END"
        )
    match = re.match(r"--\s*language:\s*(\w+)\s*$", first)
    if match:
        language = match.group(1)
        text = "\n".join(text.splitlines()[1:]).strip("\n")
    for tag in (BODY_TAG, TLE_TAG) + PG_TLE_RESERVED:
        if tag in text:
            fail(f"{path.relative_to(ROOT)} contains the dollar tag {tag}")
    return language, text


def replace_c_functions(text, used):
    def replace(match):
        declared = re.findall(r"CREATE FUNCTION\s+([\w.]+)\s*\(", text[: match.start()])
        if not declared:
            fail(f"no CREATE FUNCTION before {match.group('sym')}")
        language, body = body_of(match.group("sym"), declared[-1], used)
        attrs = match.group("attrs").strip()
        if match.group("sym") in PARALLEL_UNSAFE_HERE:
            attrs = attrs.replace("PARALLEL SAFE", "PARALLEL UNSAFE")
        return (
            f"LANGUAGE {language} {attrs} SECURITY DEFINER\n"
            f"SET search_path = pg_catalog, pg_temp\n"
            f"AS {BODY_TAG}\n{body}\n{BODY_TAG};"
        )

    return C_FUNCTION.sub(replace, text)


def for_install(text, plain):
    """A script's text for the plain install (plain=True) or for CREATE EXTENSION."""
    if plain:
        # outside CREATE EXTENSION there is no extension whose members pg_dump would skip:
        # the tables are dumped as ordinary tables
        text = re.sub(
            r"^SELECT pg_catalog\.pg_extension_config_dump\([^;]*\);\n",
            "",
            text,
            flags=re.MULTILINE,
        )
        text = text.replace("@extschema@", "public")
    return text


def internals(names, plain):
    parts = []
    for internal in names:
        path = EDITION / internal
        if not path.exists():
            fail(f"{path.relative_to(ROOT)} is missing")
        parts.append(f"-- from sql/edition/{internal}\n{for_install(path.read_text(), plain)}")
    return parts


def script(plain):
    """The install script: for the plain install (plain=True) or inside CREATE EXTENSION."""
    used = set()
    parts = []
    for name in native_files():
        text = replace_c_functions((ROOT / "sql" / name).read_text(), used)
        parts.append(f"-- from sql/{name}\n{for_install(text, plain)}")
        if name == "schema.sql":
            parts.extend(internals(INTERNALS_FIRST, plain))
    parts.extend(internals(INTERNALS_LAST, plain))
    # the internals are for pg_idem's own functions only
    parts.append(
        "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA idem FROM PUBLIC;\n"
        "REVOKE ALL ON ALL TABLES IN SCHEMA idem FROM PUBLIC;\n"
    )
    unused = {p.name for p in (EDITION / "functions").glob("*.sql")} - used
    if unused:
        fail(f"bodies of no C function: {sorted(unused)}")
    return "\n".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "target" / "sql-edition"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    v = version()

    plain = (
        f"-- pg_idem {v}, SQL edition: the plain install (generated by scripts/sql_edition.py).\n"
        "-- Run it once in a database, in one transaction, as the role that will own pg_idem:\n"
        f"--     psql -1 -v ON_ERROR_STOP=1 -f pg_idem--{v}.sql\n"
        "-- The functions go into schema public, pg_idem's state into schema idem.\n"
        "SET search_path = public;\n\n"
        + script(plain=True)
        + "\nRESET search_path;\n"
    )
    # ASCII only: a migration tool or pg_tle sends the file as one string, which the server
    # converts from the client encoding before the script's own encoding check could run
    # (the pg_tle package wraps the same text)
    bad = next((c for c in plain if ord(c) > 127), None)
    if bad is not None:
        fail(f"non-ASCII character {bad!r} in the install: sql/ and sql/edition/ must be ASCII")
    (out / f"pg_idem--{v}.sql").write_text(plain)

    inner = script(plain=False)
    if TLE_TAG in inner:
        fail(f"the script contains {TLE_TAG}")
    tle = (
        f"-- pg_idem {v}, SQL edition: the pg_tle package (generated by scripts/sql_edition.py).\n"
        "-- Run it as a role with pgtle_admin (on RDS and Aurora: rds_superuser), then\n"
        "-- CREATE EXTENSION pg_idem in each database that uses it.\n"
        "SELECT pgtle.install_extension(\n"
        "    'pg_idem',\n"
        f"    '{v}',\n"
        "    'Exactly-once effects: idempotency keys, leases and fencing tokens (SQL edition)',\n"
        f"{TLE_TAG}\n{inner}\n{TLE_TAG}\n);\n"
    )
    (out / f"pg_idem--{v}.tle.sql").write_text(tle)
    print(out / f"pg_idem--{v}.sql")
    print(out / f"pg_idem--{v}.tle.sql")


if __name__ == "__main__":
    main()
