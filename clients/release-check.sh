#!/usr/bin/env bash
# Checks the HTTP packages' release artifacts (clients/release.sh's folder DIR) from the
# artifacts alone, each installed or built in a temporary directory of its own (never this
# checkout's venv, node_modules or build folders as the thing under test):
#   python  the wheel's files and metadata; the wheel in a fresh venv (with FastAPI, psycopg_pool,
#           psycopg[binary] and uvicorn from pip's cache or PyPI), the README's FastAPI quick
#           start run there; the sdist builds (pip, isolated) a wheel with the same files
#   node    the tarball installed with npm (and its peers pg and Express, at package-lock.json's
#           versions) into a clean directory: its files, require and import, the Express quick start
#   rust    the .crate unpacked and built offline (only the crate compiles: into the workspace's
#           target directory, whose dependencies it shares), its axum quick start built and run
#   java    the jar's files, the pom (parses, the jar's version, what Central is told), the
#           sources and javadoc jars; the servlet quick start compiled and run against the jar
#           and Debian's Tomcat and PgJDBC jars only
#   go      the module zip's layout; unpacked, the quick start built against it and run
# Every quick start (clients/conformance/quickstart.py, as the conformance suite runs them)
# asks for one payment twice: 201, then the same bytes replayed. They run against a throwaway
# PostgreSQL 15 (scripts/lib/pg.sh) with pg_idem's SQL edition installed by a role that is no
# superuser: FILE (--sql), else DIR/pg_idem--<version>.sql. Prints "ok - ..." / "not ok - ..."
# per check (a failure's output follows as "#" lines) and ends with "N passed, N failed".
#   clients/release-check.sh DIR [--sql FILE]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
usage() { echo "usage: clients/release-check.sh DIR [--sql FILE]" >&2; exit 2; }
if [ $# = 0 ] || [ ! -d "$1" ]; then usage; fi
dir="$(cd "$1" && pwd)"
shift
sql=""
while [ $# -gt 0 ]; do
    case "$1" in
        --sql) [ $# -ge 2 ] || usage; sql="$2"; shift 2 ;;
        *) usage ;;
    esac
done
[ -n "$sql" ] || sql="$dir/pg_idem--$(sed -nE 's/^version = "([^"]+)"/\1/p' "$root/Cargo.toml" | head -n 1).sql"
[ -f "$sql" ] || { echo "clients/release-check.sh: no SQL edition file $sql (--sql FILE)" >&2; exit 2; }
sql="$(cd "$(dirname "$sql")" && pwd)/$(basename "$sql")"

cd "$root" || exit 2
# shellcheck source=../scripts/lib/versions.sh
source scripts/lib/versions.sh
use_pg 15
# shellcheck source=../scripts/lib/pg.sh
source scripts/lib/pg.sh
work="$(mktemp -d /tmp/pg_idem_release_check.XXXXXX)"
chmod 755 "$work" # pg_start hands its directory to the postgres user
cleanup() {
    [ -d "$work/pg" ] && pg_stop "$work/pg"
    rm -rf "$work"
}
trap cleanup EXIT
passed=0
failed=0
started=$SECONDS

# check NAME COMMAND...: one "ok"/"not ok" line with its seconds; a failure's output after it,
# as "#" lines
check() {
    local name="$1" log="$work/check.log" start=$SECONDS
    shift
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "ok - $name ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1))
        echo "not ok - $name ($((SECONDS - start)) s)"
        tail -n 40 "$log" | sed 's/^/#   /'
    fi
}
# artifact PATTERN: the one file of DIR that matches (none, or more than one: fails)
artifact() {
    # shellcheck disable=SC2206 # PATTERN is a glob
    local found=("$dir"/$1)
    [ "${#found[@]}" = 1 ] && [ -f "${found[0]}" ] && echo "${found[0]}"
}
missing() { failed=$((failed + 1)); echo "not ok - $1: not one file $2 in $dir"; }
# quickstart NAME PACKAGE: the README's quick start NAME with the package from PACKAGE, against a
# database of its own
quickstart() {
    mkdir -p "$work/qs-$1"
    python3 "$here/conformance/quickstart.py" "$1" "postgresql://app_owner@127.0.0.1:$PGPORT/qs_$1" "$work/qs-$1" --package "$2"
}

# the server: pg_idem's SQL edition in a template database owned by a role that is no superuser
# (as on a managed service), one database per quick start made from it
server() {
    local db
    pg_start "$work/pg" >/dev/null &&
        psql -X -q -v ON_ERROR_STOP=1 -c 'CREATE ROLE app_owner LOGIN CREATEROLE' \
            -c 'CREATE DATABASE qs_template OWNER app_owner' &&
        psql -X -q -v ON_ERROR_STOP=1 -U app_owner -d qs_template -1 -f "$sql" >/dev/null &&
        for db in fastapi express axum servlet nethttp; do
            psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE qs_$db OWNER app_owner TEMPLATE qs_template" || return 1
        done
}
check "a PostgreSQL 15 with the SQL edition ($(basename "$sql")) installed by a non-superuser" server

# ---- Python: the wheel and the sdist
python_wheel_files() {
    python3 - "$1" <<'PY'
import re, sys, zipfile
wheel = sys.argv[1]
version = re.match(r"pg_idem_http-([^-]+)-py3-none-any\.whl$", wheel.rsplit("/", 1)[1]).group(1)
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    meta = z.read(f"pg_idem_http-{version}.dist-info/METADATA").decode()
for name in ("pg_idem_http/__init__.py", "pg_idem_http/contract.json", "pg_idem_http/py.typed"):
    assert name in names, f"the wheel has no {name}"
assert f"\nVersion: {version}\n" in meta, "METADATA names another version"
assert "License-Expression: PostgreSQL" in meta
assert not any("uvicorn" in line for line in meta.splitlines() if line.startswith("Requires-Dist")), \
    "an extra installs a server"
PY
}
python_venv() {
    python3 -m venv "$work/venv" &&
        "$work/venv/bin/pip" install -q --disable-pip-version-check "$1[fastapi,binary]" uvicorn
}
python_import() {
    (cd "$work" && "$work/venv/bin/python" - "$1" <<'PY'
import pg_idem_http, re, sys
assert pg_idem_http.__file__.startswith(sys.prefix), pg_idem_http.__file__
assert pg_idem_http.CONTRACT["contract_version"] == 2
wheel_version = re.search(r"pg_idem_http-([^-]+)-py3-none-any\.whl$", sys.argv[1]).group(1)
assert pg_idem_http.__version__ == wheel_version, (pg_idem_http.__version__, wheel_version)
PY
)
}
# the sdist built as pip builds one it has no wheel for (isolated: setuptools from pip's cache or
# PyPI); the wheel it makes holds the released wheel's files, the package's with the same bytes
python_sdist() {
    "$work/venv/bin/pip" wheel -q --disable-pip-version-check --no-deps -w "$work/sdist-wheel" "$1" &&
        python3 - "$2" "$work"/sdist-wheel/pg_idem_http-*.whl <<'PY'
import sys, zipfile
released, rebuilt = (zipfile.ZipFile(p) for p in sys.argv[1:])
assert sorted(released.namelist()) == sorted(rebuilt.namelist()), \
    (sorted(set(released.namelist()) ^ set(rebuilt.namelist())))
for name in released.namelist():
    if ".dist-info/" not in name:
        assert released.read(name) == rebuilt.read(name), f"{name} differs"
PY
}
if wheel="$(artifact 'pg_idem_http-*-py3-none-any.whl')"; then
    check "python: the wheel holds the package, contract.json and py.typed; its METADATA the version and licence, no server" python_wheel_files "$wheel"
    check "python: the wheel installs into a fresh venv with FastAPI, psycopg_pool, psycopg[binary], uvicorn" python_venv "$wheel"
    check "python: the package imports from the venv with its contract (contract 2) and the wheel's version" python_import "$wheel"
    check "python: the README's FastAPI quick start, from the venv, replays" quickstart fastapi "$work/venv/bin/python"
    if sdist="$(artifact 'pg_idem_http-*.tar.gz')"; then
        check "python: the sdist builds a wheel holding the released wheel's files" python_sdist "$sdist" "$wheel"
    else missing "python: the sdist" 'pg_idem_http-*.tar.gz'; fi
else missing "python: the wheel" 'pg_idem_http-*-py3-none-any.whl'; fi

# ---- Node.js: the npm tarball
# the peers at the versions the package is tested with (package-lock.json)
node_peer() { node -p "require('$here/node/package-lock.json').packages['node_modules/$1'].version"; }
node_install() {
    mkdir -p "$work/node" && (cd "$work/node" &&
        echo '{ "name": "pg-idem-http-release-check", "private": true }' >package.json &&
        npm install --prefer-offline --no-audit --no-fund --loglevel=error "$1" \
            "pg@$(node_peer pg)" "express@$(node_peer express)")
}
node_installed() { (cd "$work/node" && node "$here/node/test/installed-check.js"); }
node_tarball_version() {
    [ "$(tar -xOzf "$1" package/package.json | node -p 'JSON.parse(require("fs").readFileSync(0)).version')" = \
        "$(basename "$1" .tgz | sed 's/^pg-idem-http-//')" ]
}
if tarball="$(artifact 'pg-idem-http-*.tgz')"; then
    check "node: the tarball's package.json names the file's version" node_tarball_version "$tarball"
    check "node: the tarball installs with npm into a clean directory, with pg and Express" node_install "$tarball"
    check "node: the installed package holds its files and the licence; require and import load it" \
        node_installed
    check "node: the README's Express quick start, from the installed package, replays" quickstart express "$work/node/node_modules"
else missing "node: the tarball" 'pg-idem-http-*.tgz'; fi

# ---- Rust: the .crate
rust_build() {
    local target="${CARGO_TARGET_DIR:-$root/target}" src saved="$work/workspace-quickstart"
    mkdir -p "$work/crate" && tar -xzf "$1" -C "$work/crate" || return 1
    src="$(echo "$work"/crate/pg-idem-http-*)"
    cmp "$root/LICENSE" "$src/LICENSE" || { echo "the .crate's LICENSE is not the repository's"; return 1; }
    # the .crate's files carry a fixed old mtime: without this, cargo would take an earlier
    # unpacked build's outputs (same package, same target directory) as fresh and build nothing
    find "$src" -type f -exec touch {} +
    # the quick start's executable lands where the workspace's own does (the conformance suite
    # runs target/debug/examples/quickstart): it is taken away and the workspace's put back
    mkdir -p "$saved" && cp -p "$target"/debug/examples/quickstart{,.d} "$saved"/ 2>/dev/null
    (cd "$src" && CARGO_TARGET_DIR="$target" cargo build -q --offline --lib --example quickstart &&
        CARGO_TARGET_DIR="$target" cargo check -q --offline --bins &&
        cp "$target/debug/examples/quickstart" "$work/axum-quickstart")
    local rc=$?
    rm -f "$target"/debug/examples/quickstart{,.d}
    cp -p "$saved"/* "$target"/debug/examples/ 2>/dev/null
    return $rc
}
if crate="$(artifact 'pg-idem-http-*.crate')"; then
    check "rust: the .crate holds the LICENSE and, unpacked, builds offline (library, axum quick start; its bin checked)" rust_build "$crate"
    check "rust: the README's axum quick start, built from the .crate, replays" quickstart axum "$work/axum-quickstart"
else missing "rust: the crate" 'pg-idem-http-*.crate'; fi

# ---- Java: the jar, its pom, the sources and javadoc jars
java_jar() {
    local listing
    listing="$(jar --list --file "$1")" || return 1
    for entry in io/github/pgidem/http/IdempotencyFilter.class io/github/pgidem/http/contract.json \
        META-INF/LICENSE META-INF/maven/io.github.pg-idem/pg-idem-http/pom.xml; do
        grep -qx "$entry" <<<"$listing" || { echo "the jar has no $entry"; return 1; }
    done
    (cd "$work" && mkdir -p jar && cd jar && jar --extract --file "$1" META-INF/maven/io.github.pg-idem/pg-idem-http/pom.xml) &&
        cmp "$work/jar/META-INF/maven/io.github.pg-idem/pg-idem-http/pom.xml" "$2"
}
# the pom parses; its coordinates are the jar's; Central is told the licence, Java 17, and that
# the only dependency a user gets is none (the servlet API is provided, the rest test scope)
java_pom() {
    python3 - "$1" "$2" <<'PY'
import os, sys, xml.etree.ElementTree as ET
pom, jar = sys.argv[1:]
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
root = ET.parse(pom).getroot()
text = lambda path: root.findtext(path, namespaces=ns)
version = text("m:version")
assert (text("m:groupId"), text("m:artifactId")) == ("io.github.pg-idem", "pg-idem-http")
assert os.path.basename(jar) == f"pg-idem-http-{version}.jar", (version, jar)
assert os.path.basename(pom) == f"pg-idem-http-{version}.pom", (version, pom)
assert text("m:licenses/m:license/m:name") == "PostgreSQL"
assert text("m:properties/m:maven.compiler.release") == "17"
scopes = {d.findtext("m:artifactId", namespaces=ns): d.findtext("m:scope", namespaces=ns)
          for d in root.findall("m:dependencies/m:dependency", ns)}
assert scopes.pop("jakarta.servlet-api") == "provided", scopes
assert set(scopes.values()) <= {"test"}, scopes
assert "/usr/share" not in open(pom).read()
PY
}
# the javadoc jar documents the classes a user touches
java_javadoc() {
    local listing page
    listing="$(jar --list --file "$1")" || return 1
    for page in index.html io/github/pgidem/http/IdempotencyFilter.html io/github/pgidem/http/Route.html \
        io/github/pgidem/http/Idem.html io/github/pgidem/http/LeaseContext.html; do
        grep -qx "$page" <<<"$listing" || { echo "the javadoc jar has no $page"; return 1; }
    done
}
java_sources() {
    local listing
    listing="$(jar --list --file "$1")" &&
        grep -qx io/github/pgidem/http/IdempotencyFilter.java <<<"$listing" &&
        grep -qx io/github/pgidem/http/contract.json <<<"$listing"
}
if jar="$(artifact 'pg-idem-http-[0-9]*[0-9].jar')" && pom="$(artifact 'pg-idem-http-*.pom')"; then
    check "java: the jar holds the filter, contract.json, the licence and the released pom" java_jar "$jar" "$pom"
    check "java: the pom parses: the jar's coordinates, licence PostgreSQL, Java 17, no runtime dependency" java_pom "$pom" "$jar"
    if sources="$(artifact 'pg-idem-http-*-sources.jar')"; then
        check "java: the sources jar holds the filter's source and contract.json" java_sources "$sources"
    else missing "java: the sources jar" 'pg-idem-http-*-sources.jar'; fi
    if javadoc="$(artifact 'pg-idem-http-*-javadoc.jar')"; then
        check "java: the javadoc jar documents the filter, Route, Idem and LeaseContext" java_javadoc "$javadoc"
    else missing "java: the javadoc jar" 'pg-idem-http-*-javadoc.jar'; fi
    check "java: the README's servlet quick start, against the jar and Debian's Tomcat and PgJDBC, replays" quickstart servlet "$jar"
else missing "java: the jar and its pom" 'pg-idem-http-<version>.jar/.pom'; fi

# ---- Go: the module zip
go_zip() {
    python3 - "$1" "$work/go" <<'PY'
import os, re, sys, zipfile
path, into = sys.argv[1:]
with zipfile.ZipFile(path) as z:
    names = z.namelist()
    # <module path>@<version>/: the module path has slashes, the version none
    at = names[0].index("@")
    prefix = names[0][:names[0].index("/", at) + 1]
    module, version = prefix[:-1].rsplit("@", 1)
    assert all(n.startswith(prefix) for n in names), "an entry outside " + prefix
    assert os.path.basename(path) == module.replace("/", "-") + f"-{version}.zip", (path, prefix)
    assert re.fullmatch(r"v\d+\.\d+\.\d+", version), version
    gomod = z.read(prefix + "go.mod").decode()
    assert re.search(rf"^module {re.escape(module)}$", gomod, re.M), "go.mod names another module"
    assert [n for n in names if n.endswith("/go.mod")] == [prefix + "go.mod"], "a nested module"
    for name in ("LICENSE", "contract.json", "README.md", "version.go"):
        assert prefix + name in names, f"no {name}"
    assert f'const Version = "{version[1:]}"' in z.read(prefix + "version.go").decode()
    folded = [n.casefold() for n in names]
    assert len(set(folded)) == len(folded), "two entries equal under case folding"
    z.extractall(into)
with open(into + ".dir", "w") as f:
    f.write(os.path.join(into, prefix))
PY
}
if zip="$(artifact '*-clients-go-v*.zip')"; then
    check "go: the zip's entries under <module>@v<version>/ as go.mod and version.go say; LICENSE; no nested module" go_zip "$zip"
    if [ -f "$work/go.dir" ]; then
        check "go: the README's quick start, built against the unpacked module, replays" quickstart nethttp "$(cat "$work/go.dir")"
    else failed=$((failed + 1)); echo "not ok - go: the README's quick start: the zip did not unpack"; fi
else missing "go: the module zip" '*-clients-go-v*.zip'; fi

echo "# $((SECONDS - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
