#!/usr/bin/env python3
"""Builds pg_idem's SQL edition: the same objects CREATE EXTENSION pg_idem creates, with every
C function replaced by its SQL or PL/pgSQL body, for servers that cannot load pg_idem's library
(managed PostgreSQL). Nothing is declared twice: the declarations (names, arguments, defaults,
result types, comments, grants) are read from the native edition's sql/*.sql in the order
src/lib.rs loads them; only the bodies come from sql/edition/.

    scripts/sql_edition.py [--out DIR] [--from OLD ...] [--updates]   (default target/sql-edition)

writes
    pg_idem--<version>.sql        the plain install: psql -1 -f it (or give it to a migration
                                  tool) in a database as the role that will own pg_idem
    pg_idem--<version>.tle.sql    the pg_tle package: registers the same script with
                                  pgtle.install_extension, after which CREATE EXTENSION pg_idem
                                  works as usual (RDS, Aurora, Supabase)
and, for each earlier SQL edition OLD given with --from, or for every earlier release with
--updates (those the native update scripts name, from 0.5.0, the first, on),
    pg_idem--OLD--<version>.sql      the plain update: psql -1 -f it as pg_idem's owner
    pg_idem--OLD--<version>.tle.sql  the pg_tle update: registers the update path and this
                                     version, and makes it the default, after which
                                     ALTER EXTENSION pg_idem UPDATE works as usual

An update is made of what the release already has, so nothing is written twice:
  1. the native edition's update scripts from OLD to this version (sql/pg_idem--A--B.sql,
     chained), their C functions given their SQL bodies as in the install;
  2. sql/edition/updates/pg_idem--A--B.sql where one exists: what only the SQL edition's own
     objects need beyond functions (a type or a table of sql/edition/ changed), up to a line
     `-- after the functions` if it has one;
  3. every function and comment of this version's install, CREATE OR REPLACE: so every body
     is this version's, whichever changed; a changed result type or argument list must be
     dropped by step 1 or 2 first (CREATE OR REPLACE refuses it: the update fails, nothing is
     half done); then the rest of step 2's files, after their line `-- after the functions`:
     what needs this version's functions (a CHECK or a trigger that calls one, rows rewritten
     by one). In an update over several releases every file's part before that line runs
     before any file's part after it: a later file's first part cannot change what an earlier
     file's second part creates (give it a second part of its own);
  4. the functions of schema idem that step 3 did not write (internals this version no longer
     has) dropped: in an extension only its members; in a plain install every function there,
     which belongs to pg_idem, each with a NOTICE.
Function bodies are not checked while the update runs (check_function_bodies off, as pg_dump
does): a body may name what a later statement creates. tests/sql_edition/sql_edition_updates.rs
updates a database from one version to a made-up next one and compares it with a fresh install.

A function `sym` declared `LANGUAGE c ... AS 'MODULE_PATHNAME', 'sym'` gets the body in
sql/edition/functions/sym.sql. Its first line may say `-- language: sql` (default plpgsql), or
be all of it: `-- same as: other_sym; 'a' -> 'b'`, other_sym's body with the literals 'a'
(found there exactly once) made 'b'.
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
# of a copy. The rules are one file per module of src/ they mirror, in this order (a LANGUAGE
# sql body is checked against the functions before it when it is created).
INTERNALS_FIRST = ["settings.sql", "hashing.sql", "statistics.sql"]
INTERNALS_LAST = [
    f"rules/{name}.sql"
    for name in ("errors", "args", "tenants", "key_row", "claims", "fenced", "consumes", "purge", "streams")
]
# Functions declared PARALLEL SAFE natively whose SQL body is not: its tenant check runs a
# subtransaction (idem.in_restricted_operation), which a parallel worker may not start. The
# native function answers there (its tenant check reads the grants with the snapshot parallel
# mode allows, src/pg/heap/scan.rs), so the declaration stays (a Citus cluster's update cannot ALTER
# a distributed function inside ALTER EXTENSION UPDATE).
PARALLEL_UNSAFE_HERE = {"idem_watermark_wrapper"}
# the SQL edition's first release: there is nothing older to update from
FIRST_RELEASE = "0.5.0"
# the releases without idem_version() (it came with 0.6.0): a plain update from one of them
# knows it by its idem_claim found through the search_path
WITHOUT_IDEM_VERSION = {"0.5.0"}
# in sql/edition/updates/pg_idem--A--B.sql: what follows runs after this version's functions
AFTER_FUNCTIONS = "-- after the functions"
# dollar tags a body may not contain: the function's own and pg_tle's wrapper's
BODY_TAG = "$pg_idem$"
# in a function body: this version (sql/edition/functions/idem_version_wrapper.sql)
VERSION_TAG = "@PG_IDEM_VERSION@"
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


def statements(text):
    """Splits SQL text at the semicolons that end statements: not those inside quotes, quoted
    identifiers, comments, dollar quotes or a SQL-standard body (BEGIN ATOMIC ... END, whose
    CASE ... END nest)."""
    out, start, i, n = [], 0, 0, len(text)
    previous_word, atomic = "", 0
    while i < n:
        c = text[i]
        if (c.isalpha() or c == "_") and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_$")):
            word = re.match(r"[A-Za-z_][A-Za-z_0-9$]*", text[i:]).group(0).upper()
            if word == "ATOMIC" and previous_word == "BEGIN":
                atomic = 1
            elif atomic and word == "CASE":
                atomic += 1
            elif atomic and word == "END":
                atomic -= 1
            previous_word = word
            i += len(word)
            if i < n and text[i] == "'" and word in ("E", "U&", "B", "X"):
                continue
        elif c == "-" and text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i + 1
        elif c == "/" and text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c in "'\"":
            escapes = c == "'" and previous_word == "E" and i > 0 and text[i - 1] in "eE"
            i += 1
            while i < n:
                if escapes and text[i] == "\\":
                    i += 2
                elif text[i] == c:
                    if text.startswith(c * 2, i):
                        i += 2
                    else:
                        break
                else:
                    i += 1
            i += 1
        elif c == "$":
            tag = re.match(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$", text[i:])
            if tag and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
                end = text.find(tag.group(0), i + len(tag.group(0)))
                if end < 0:
                    fail(f"an unterminated dollar quote {tag.group(0)}")
                i = end + len(tag.group(0))
            else:
                i += 1
        elif c == ";" and not atomic:
            out.append(text[start : i + 1])
            start = i = i + 1
            previous_word = ""
        else:
            i += 1
    if text[start:].strip() and not re.fullmatch(r"(\s|--[^\n]*\n?)*", text[start:]):
        fail(f"text after the last statement: {text[start:][:80]!r}")
    return out


def without_comments(statement):
    """A statement's text without its leading comment lines and blank lines."""
    return re.sub(r"\A(\s*--[^\n]*\n|\s+)*", "", statement)


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
        # and says why with 0A000 (docs/editions.md's table of differences lists each)
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
    same = re.match(r"--\s*same as:\s*(\w+)((?:\s*;\s*'[^']*'\s*->\s*'[^']*')+)\s*$", first)
    if same:
        # two functions whose bodies differ only in literals (idem_fail_final is
        # idem_complete with another name and action): one body, the differences named, each
        # found exactly once in it
        if len(text.splitlines()) != 1:
            fail(f"{path.relative_to(ROOT)}: a body that is the same as another's has nothing more")
        language, text = body_of(same.group(1), function, used)
        for old, new in re.findall(r"'([^']*)'\s*->\s*'([^']*)'", same.group(2)):
            if text.count(f"'{old}'") != 1:
                fail(f"{path.relative_to(ROOT)}: '{old}' is not in {same.group(1)}.sql exactly once")
            text = text.replace(f"'{old}'", f"'{new}'")
        return language, text
    match = re.match(r"--\s*language:\s*(\w+)\s*$", first)
    if match:
        language = match.group(1)
        text = "\n".join(text.splitlines()[1:]).strip("\n")
    for tag in (BODY_TAG, TLE_TAG) + PG_TLE_RESERVED:
        if tag in text:
            fail(f"{path.relative_to(ROOT)} contains the dollar tag {tag}")
    # idem_version(): a plain install has no catalog row that records its version
    return language, text.replace(VERSION_TAG, version())


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


# Facts the native edition defines once, written into the SQL edition's files where they say
# @NAME@, so that the two editions cannot hold different ones: the limits of the arguments, and
# how many times a claim reads its key again (rules/, the decisions without PostgreSQL).
SHARED_FACTS = {
    "MAX_KEY_BYTES": "src/sql_api/args.rs",
    "MAX_REQUEST_HASH_CHARS": "src/sql_api/args.rs",
    "CLAIM_ROUNDS": "rules/src/claims.rs",
}


def shared_facts():
    facts = {}
    for name, path in SHARED_FACTS.items():
        source = (ROOT / path).read_text()
        match = re.search(rf"^pub const {name}: usize = ([0-9_]+);$", source, re.MULTILINE)
        if not match:
            fail(f"no `pub const {name}: usize` in {path}")
        facts[name] = match.group(1).replace("_", "")
    return facts


def for_install(text, plain):
    """A script's text for the plain install (plain=True) or for CREATE EXTENSION."""
    for name, value in shared_facts().items():
        text = text.replace(f"@{name}@", value)
    unknown = re.search(r"@[A-Z][A-Z_]+@", text)
    if unknown:
        fail(f"{unknown.group(0)} is none of the shared facts ({', '.join(SHARED_FACTS)})")
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


def version_key(v):
    return tuple(int(part) for part in re.findall(r"\d+", v))


def earlier_releases():
    """The SQL edition's releases before this version: the versions the native update scripts
    name, from FIRST_RELEASE on."""
    names = set()
    for path in (ROOT / "sql").glob("pg_idem--*--*.sql"):
        names.update(path.name[len("pg_idem--") : -len(".sql")].split("--"))
    return sorted(
        (v for v in names if version_key(FIRST_RELEASE) <= version_key(v) < version_key(version())),
        key=version_key,
    )


def update_chain(old, new):
    """The native update scripts from version `old` to `new`, in the order they run."""
    steps = {}
    for path in (ROOT / "sql").glob("pg_idem--*--*.sql"):
        a, b = path.name[len("pg_idem--") : -len(".sql")].split("--")
        steps.setdefault(a, []).append((b, path))
    paths, seen = [[old, []]], {old}
    while paths:
        version_at, chain = paths.pop(0)
        if version_at == new:
            return chain
        for b, path in sorted(steps.get(version_at, [])):
            if b not in seen:
                seen.add(b)
                paths.append([b, chain + [path]])
    fail(f"no update path from {old} to {new} in sql/pg_idem--A--B.sql")


# Step 4 of an update (see the module's documentation): what step 3 wrote carries this
# transaction's xid as its catalog rows' xmin, which a marker made here gives at any
# subtransaction depth the update runs at.
DROP_LEFTOVERS = """DO $pg_idem_update$
DECLARE
    here pg_catalog.xid;
    leftover pg_catalog.regprocedure;
BEGIN
    CREATE FUNCTION idem.pg_idem_update_marker() RETURNS void LANGUAGE sql AS '';
    SELECT p.xmin INTO here FROM pg_catalog.pg_proc AS p
     WHERE p.oid OPERATOR(pg_catalog.=) 'idem.pg_idem_update_marker()'::pg_catalog.regprocedure;
    DROP FUNCTION idem.pg_idem_update_marker();
    -- an update run statement by statement (psql without -1) wrote its functions in other
    -- transactions: every function would look left over
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                    WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idem'::pg_catalog.regnamespace
                      AND p.xmin OPERATOR(pg_catalog.=) here) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_transaction_state',
            MESSAGE = 'pg_idem update: the update must run in one transaction',
            DETAIL = 'Its functions were written in other transactions than this statement''s, so it cannot tell which functions the new version no longer has.',
            HINT = 'Run the whole file in one transaction (psql -1 -v ON_ERROR_STOP=1 -f ...); the functions of the new version are in place, the old ones are not dropped.';
    END IF;
    FOR leftover IN
        SELECT p.oid::pg_catalog.regprocedure FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'idem'::pg_catalog.regnamespace
           AND NOT p.xmin OPERATOR(pg_catalog.=) here
           AND %s
    LOOP
        RAISE NOTICE 'pg_idem update: dropping %%, which this version no longer has', leftover;
        EXECUTE pg_catalog.format('DROP FUNCTION %%s', leftover);
    END LOOP;
END
$pg_idem_update$;
"""
IN_EXTENSION = """EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                        WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                          AND d.objid OPERATOR(pg_catalog.=) p.oid
                          AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
                          AND d.deptype OPERATOR(pg_catalog.=) 'e')"""


# A plain update refuses a database that is not at the version it updates from: run twice, or
# out of order, its step 1 would change tables the wrong way.
UPDATE_GUARD = """DO $pg_idem_update$
DECLARE
    installed text;
BEGIN
    IF pg_catalog.to_regprocedure('idem_version()') IS NULL THEN
@WITHOUT_IDEM_VERSION@
    ELSE
        EXECUTE 'SELECT idem_version()' INTO installed;
@WITH_IDEM_VERSION@
    END IF;
    IF installed IS DISTINCT FROM '@OLD@' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = pg_catalog.format('pg_idem update: this file updates @OLD@ to @NEW@, and this database has %s', installed),
            DETAIL = 'Nothing was changed.',
            HINT = pg_catalog.format('Run pg_idem--%s--@NEW@.sql (or the updates from %s on, in order); none is needed when it is @NEW@ already.', installed, installed);
    END IF;
END
$pg_idem_update$;
"""
NOT_FOUND = """        RAISE EXCEPTION USING
            ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = 'pg_idem update: no pg_idem SQL edition found through the search_path',
            DETAIL = 'This file updates pg_idem @OLD@ to @NEW@; @FUNCTION@ is not found.',
            HINT = 'Set search_path to the schema pg_idem was installed into, then run the file again.';"""
# a release without idem_version(): its idem_claim, and a build made after it that has
# idem_version() and answers the same version, which no update knows (the release's objects
# and that build's differ)
RELEASE_WITHOUT_IDEM_VERSION = """        IF pg_catalog.to_regprocedure('idem_claim(text, text, text, interval, interval)') IS NULL THEN
@NOT_FOUND@
        END IF;
        installed := '@OLD@';"""
BUILD_AFTER_RELEASE = """        IF installed OPERATOR(pg_catalog.=) '@OLD@' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'object_not_in_prerequisite_state',
                MESSAGE = 'pg_idem update: this database has a build of @OLD@ made after its release, which no update knows',
                DETAIL = 'The released @OLD@ has no idem_version(); this install has one that answers @OLD@. Nothing was changed.',
                HINT = 'Install @NEW@ in a new database and copy pg_idem''s rows into it (docs/upgrade.md, The SQL edition).';
        END IF;"""


def update_guard(old, new):
    """The first statement of a plain update: it refuses a database that is not at `old`."""
    if old in WITHOUT_IDEM_VERSION:
        without = RELEASE_WITHOUT_IDEM_VERSION.replace("@NOT_FOUND@", "    " + NOT_FOUND.replace("\n", "\n    "))
        without = without.replace("@FUNCTION@", "idem_claim(text, text, text, interval, interval)")
        with_version = BUILD_AFTER_RELEASE
    else:
        without = NOT_FOUND.replace("@FUNCTION@", "idem_version()")
        with_version = ""
    guard = UPDATE_GUARD.replace("@WITHOUT_IDEM_VERSION@\n", without + "\n")
    guard = guard.replace("@WITH_IDEM_VERSION@\n", with_version + "\n" if with_version else "")
    return guard.replace("@OLD@", old).replace("@NEW@", new)


def edition_update_parts(path):
    """sql/edition/updates/pg_idem--A--B.sql as (what runs before this version's functions,
    what runs after them): the file is split at its line AFTER_FUNCTIONS."""
    lines = path.read_text().split("\n")
    marks = [i for i, line in enumerate(lines) if line.rstrip() == AFTER_FUNCTIONS]
    if len(marks) > 1:
        fail(f"{path.relative_to(ROOT)} has {AFTER_FUNCTIONS!r} more than once")
    if not marks:
        return "\n".join(lines), ""
    return "\n".join(lines[: marks[0]]) + "\n", "\n".join(lines[marks[0] :])


def update_script(old, plain):
    """The update from the SQL edition `old` to this version (see the module's documentation)."""
    new = version()
    used = set()
    parts = ["SET LOCAL check_function_bodies = off;\n"]
    if plain:
        # ALTER EXTENSION knows the version it updates from; a plain file must check it
        parts.append(update_guard(old, new))
    for path in update_chain(old, new):
        text = replace_c_functions(path.read_text(), used)
        parts.append(f"-- from sql/{path.name}\n{for_install(text, plain)}")
    afterwards = []
    for path in update_chain_edition(old, new):
        before, after = edition_update_parts(path)
        parts.append(f"-- from sql/edition/updates/{path.name}\n{for_install(before, plain)}")
        if after:
            afterwards.append(f"-- from sql/edition/updates/{path.name}, after the functions\n{for_install(after, plain)}")
    redeclared = []
    for statement in statements(script(plain)):
        head = without_comments(statement)
        if re.match(r"CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b", head, re.IGNORECASE):
            redeclared.append(
                re.sub(r"\ACREATE\s+(OR\s+REPLACE\s+)?FUNCTION", "CREATE OR REPLACE FUNCTION", head, flags=re.IGNORECASE)
            )
        elif re.match(r"COMMENT\s+ON\s+FUNCTION\b", head, re.IGNORECASE):
            redeclared.append(head)
    parts.append(f"-- every function of {new}, as its install declares it\n" + "\n".join(redeclared) + "\n")
    parts.extend(afterwards)
    parts.append(DROP_LEFTOVERS % ("true" if plain else IN_EXTENSION))
    parts.append(
        "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA idem FROM PUBLIC;\n"
        "REVOKE ALL ON ALL TABLES IN SCHEMA idem FROM PUBLIC;\n"
        "RESET check_function_bodies;\n"
    )
    return "\n".join(parts)


def update_chain_edition(old, new):
    """sql/edition/updates/pg_idem--A--B.sql on the native update path from `old` to `new`."""
    found = []
    for path in update_chain(old, new):
        edition = EDITION / "updates" / path.name
        if edition.exists():
            found.append(edition)
    return found


def ascii_only(text, what):
    # a migration tool or pg_tle sends the file as one string, which the server converts from
    # the client encoding before the script's own encoding check could run (the pg_tle package
    # wraps the same text)
    bad = next((c for c in text if ord(c) > 127), None)
    if bad is not None:
        fail(f"non-ASCII character {bad!r} in {what}: sql/ and sql/edition/ must be ASCII")


def write_updates(out, olds):
    v = version()
    for old in olds:
        if version_key(old) < version_key(FIRST_RELEASE):
            fail(f"there is no SQL edition {old} to update from: the first is {FIRST_RELEASE}")
        if version_key(old) >= version_key(v):
            fail(f"--from {old} is not older than this version, {v}")
        plain = (
            f"-- pg_idem {old} -> {v}, SQL edition: the plain update (generated by scripts/sql_edition.py).\n"
            "-- Run it once in each database that has the plain install, in one transaction, as pg_idem's owner:\n"
            f"--     psql -1 -v ON_ERROR_STOP=1 -f pg_idem--{old}--{v}.sql\n"
            "SET search_path = public;\n\n"
            + update_script(old, plain=True)
            + "\nRESET search_path;\n"
        )
        ascii_only(plain, f"the update from {old}")
        (out / f"pg_idem--{old}--{v}.sql").write_text(plain)
        inner = update_script(old, plain=False)
        if TLE_TAG in inner:
            fail(f"the update contains {TLE_TAG}")
        tle = (
            f"-- pg_idem {old} -> {v}, SQL edition: the pg_tle update (generated by scripts/sql_edition.py).\n"
            "-- Run it as a role with pgtle_admin in each database where pg_idem's package is registered,\n"
            "-- then ALTER EXTENSION pg_idem UPDATE where pg_idem was created. It registers the update\n"
            f"-- path, {v} itself (for new CREATE EXTENSION) and makes {v} the default version.\n"
            f"SELECT pgtle.install_update_path('pg_idem', '{old}', '{v}',\n"
            f"{TLE_TAG}\n{inner}\n{TLE_TAG}\n);\n"
            f"SELECT pgtle.install_extension_version_sql('pg_idem', '{v}',\n"
            f"{TLE_TAG}\n{script(plain=False)}\n{TLE_TAG}\n);\n"
            f"SELECT pgtle.set_default_version('pg_idem', '{v}');\n"
        )
        (out / f"pg_idem--{old}--{v}.tle.sql").write_text(tle)
        print(out / f"pg_idem--{old}--{v}.sql")
        print(out / f"pg_idem--{old}--{v}.tle.sql")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "target" / "sql-edition"))
    parser.add_argument(
        "--from",
        dest="olds",
        action="append",
        default=[],
        metavar="OLD",
        help="also write the updates from this earlier SQL edition (repeatable)",
    )
    parser.add_argument(
        "--updates",
        action="store_true",
        help="also write the updates from every earlier release of the SQL edition",
    )
    args = parser.parse_args()
    if args.updates:
        args.olds = sorted(set(args.olds) | set(earlier_releases()), key=version_key)
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
    ascii_only(plain, "the install")
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
    write_updates(out, args.olds)


if __name__ == "__main__":
    main()
