#!/usr/bin/env python3
"""Runs every SQL and shell snippet of README.md, CONTRIBUTING.md, docs/*.md and the client
packages' READMEs against real servers, and checks the output a page shows for it. Conventions
(docs/snippets.md):

    ```sql                      runs on the native edition (pg_idem preloaded)
    ```sql edition=sql          runs on the SQL edition (plain install, no preload)
    ```sql setup=NAME           runs tests/doc_snippets/NAME.sql first, in the same session
    ```sql error                must raise an error (and the page goes on)
    ```sql no-run: REASON       not run; counted as skipped, with its reason
    ```sh ...                   the same words; runs with bash in a scratch directory
                                (setup=NAME sources tests/doc_snippets/NAME.sh first)
    ```text output              right after a snippet: what it prints; <anything> in angle
                                brackets matches any text within its line (volatile values)
    ```LANG no-run: REASON      any language of RUNNABLE or DOC_ONLY: not run; counted as skipped
    ```LANG doc-only: WHAT      a language of DOC_ONLY (configuration, log lines, other languages'
                                code): what the block is; not a snippet, not run, not counted
    ```rust,no_run ...          rustdoc's attributes after a comma, on rust blocks only (doctests)
    <!-- quickstart: NAME FILE -->   on the line right above a fence: a block that another suite
    <!-- recipe: NAME FILE -->       runs as pasted (QUICKSTART_SUITE, RECIPE_SUITES): reported
                                as run there, not run here, not counted

Strict: a fence it cannot place FAILS, it is never skipped: an indented fence (inside a list item,
say: move it to the left margin), an indented code block, a fence with no language, a language
outside RUNNABLE and DOC_ONLY, a DOC_ONLY block without `doc-only:` or `no-run:`,
`no-run`/`doc-only` without a reason, an unknown word, an output block that follows no snippet, a
fence left open, a quickstart or recipe line not right above its fence or that no suite runs.

A page's SQL snippets of one edition run in order in one psql session (so psql variables set with
\\gset carry over), in a database of their own that starts empty. Each shell snippet runs alone
with PGHOST, PGPORT and PGUSER set and PostgreSQL's binaries first in PATH.

    scripts/doc_snippets.py [FILE.md ...]      (default: PAGES, below)
    PG_BINDIR (default /usr/lib/postgresql/15/bin)

With no FILE, it also checks docs/functions.md and docs/settings.md against the declarations of
the installed pg_idem (reference_checks), and every page's relative links and anchors.

Prints one line per check and ends with "N passed, N failed, N skipped" (under scripts/test.sh,
which takes the skipped lines of PG_IDEM_SKIP_LOG off the passed, the skipped are counted in both)."""

import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SETUP = ROOT / "tests" / "doc_snippets"
BINDIR = pathlib.Path(os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin"))
# any line that starts (after any indentation) with three backticks or tildes opens or closes a fence
FENCE_LINE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
RUNNABLE = {"sql", "sh", "bash"}
# languages that are documentation only: a block in one says what it is (`doc-only: WHAT`) or why
# it is not run (`no-run: REASON`)
DOC_ONLY = {"text", "conf", "ini", "json", "toml", "yaml", "python", "js", "javascript", "ts",
            "typescript", "rust", "java", "go", "http", "diff"}
# the pages run by default: README.md, CONTRIBUTING.md and docs/*.md, and the clients' READMEs
CLIENT_READMES = [f"clients/{package}/README.md" for package in ("python", "node", "rust", "go", "java")]
# A block right under `<!-- quickstart: NAME FILE -->` or `<!-- recipe: NAME FILE -->` is run as
# pasted by a suite of its own, which finds it by that line (their regexes want it directly above
# the fence, and some the bare language: ```python, ```js): such a block is reported as run there,
# neither run here nor counted, once the suite is seen to name it (a quick start: a key of RUN).
# the quick-start runner: test_quickstarts.py runs each of its TABLES' quick starts from this
# checkout, clients/release-check.sh from the release's artifacts
QUICKSTART_SUITE = "clients/conformance/quickstart.py"
RECIPE_SUITES = {"sqlalchemy": "clients/python/tests/test_recipe.py",
                 "knex": "clients/node/test/knex-recipe.test.js"}
RUN_AS_PASTED = re.compile(r"<!-- (quickstart|recipe): (\w+) ([\w./]+) -->")


def default_pages():
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md"] + sorted((ROOT / "docs").glob("*.md")) \
        + [ROOT / p for p in CLIENT_READMES]


class Unplaced(Exception):
    """A fence the runner cannot place: reported as FAILED, never skipped."""
MARK = "@@doc-snippet@@"


class Snippet:
    def __init__(self, page, line, lang, info, code):
        self.page, self.line, self.lang, self.code = page, line, lang, code
        self.expected = None
        self.no_run = None
        self.error = False
        self.edition = "native"
        self.setup = None
        m = re.match(r"no-run\b(:?)\s*(.*)", info)
        if m:
            if not m.group(1) or not m.group(2).strip():
                raise Unplaced("`no-run` needs its reason: `no-run: REASON`")
            self.no_run = m.group(2).strip()
            return
        if lang not in RUNNABLE:
            raise Unplaced(f"a block in {lang!r} is documentation only: say what it is with "
                           f"`{lang} doc-only: WHAT`, or `{lang} no-run: REASON`")
        for word in info.split():
            if word == "error":
                self.error = True
            elif word.startswith("edition="):
                self.edition = word.split("=", 1)[1]
            elif word.startswith("setup="):
                self.setup = word.split("=", 1)[1]
            else:
                raise Unplaced(f"unknown word in the fence: {word!r}")
        if self.edition not in ("native", "sql"):
            raise Unplaced(f"unknown edition {self.edition!r}")

    @property
    def where(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fences(text):
    """(line, indent, marker, lang, info, code, start, end) of each fenced block of TEXT, and the problems
    (line, why) of the blocks that cannot be read: a fence left open, an indented code block."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    found, problems = [], []
    last = ""  # the last line that is not blank, outside fenced blocks (a fence's closing line)
    i = 0
    while i < len(lines):
        m = FENCE_LINE.match(lines[i])
        if not m:
            # four spaces after a blank line, under a paragraph at the left margin that is not a
            # list item: Markdown's indented code block, which has no language to place it by
            if (re.match(r"( {4}|\t)\s*\S", lines[i]) and i and not lines[i - 1].strip()
                    and not re.match(r"\s|([-*+]|\d+[.)])(\s|$)", last)):
                problems.append((i + 1, ("an indented code block is neither run nor counted: make it "
                                         "a fence at the left margin, with its language")))
            last = lines[i] if lines[i].strip() else last
            i += 1
            continue
        indent, marker, rest = m.groups()
        head = rest.strip()
        lang, _, info = head.partition(" ")
        j = i + 1
        while j < len(lines):
            c = FENCE_LINE.match(lines[j])
            if c and c.group(2)[0] == marker[0] and len(c.group(2)) >= len(marker) and not c.group(3).strip():
                break
            j += 1
        if j == len(lines):
            problems.append((i + 1, f"a fence left open: {lines[i].strip()!r}"))
            break
        found.append((i + 1, indent, marker, lang, info.strip(), "\n".join(lines[i + 1:j]) + "\n",
                      offsets[i], offsets[j + 1] if j + 1 < len(offsets) else len(text)))
        last = lines[j]
        i = j + 1
    return found, problems


class RunElsewhere:
    """A block that a suite of its package runs as pasted (a quick start, a recipe)."""

    def __init__(self, page, line, lang, kind, name):
        self.page, self.line, self.lang, self.edition = page, line, lang, None
        if kind == "quickstart":
            suite, names_it = QUICKSTART_SUITE, f'"{name}":'
        else:
            suite, names_it = RECIPE_SUITES.get(name), name
        if suite is None:
            raise Unplaced(f"no suite runs the recipe {name!r}: name its suite in RECIPE_SUITES")
        if not (ROOT / suite).exists() or names_it not in (ROOT / suite).read_text():
            raise Unplaced(f"{suite} does not run the {kind} {name!r}")
        self.why = f"run by {suite} ({name})"

    @property
    def where(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page, problems, elsewhere):
    """The snippets of PAGE; appends (page, line, why) to PROBLEMS for each fence it cannot place,
    and to ELSEWHERE the blocks that another suite runs as pasted."""
    text = page.read_text()
    lines = text.split("\n")
    found = []
    blocks, bad = fences(text)
    problems.extend((page, line, why) for line, why in bad)
    for k, line in enumerate(lines):
        if RUN_AS_PASTED.fullmatch(line) and not (k + 1 < len(lines) and lines[k + 1].startswith("```")):
            problems.append((page, k + 1, ("a quickstart or recipe line must stand right above its "
                                           "fence, where its suite looks for the block")))
    for line, indent, marker, lang, info, code, start, end in blocks:
        try:
            if indent:
                raise Unplaced("an indented fence is neither run nor counted: put it at the left margin")
            if marker != "```":
                raise Unplaced(f"a fence opens with exactly ```, not {marker}")
            # rustdoc's own attributes (```rust,no_run): the Rust README is the crate's documentation
            lang, comma, _ = lang.partition(",")
            if comma and lang != "rust":
                raise Unplaced("attributes after a comma are rustdoc's, for rust blocks only")
            if not lang:
                raise Unplaced("a fence needs a language: sql, sh, text output, or one of DOC_ONLY "
                               "with `doc-only: WHAT` or `no-run: REASON` (docs/snippets.md)")
            if lang not in RUNNABLE and lang not in DOC_ONLY:
                raise Unplaced(f"unknown language {lang!r}: sql, sh/bash, text output, or one of "
                               + ", ".join(sorted(DOC_ONLY)) + " (docs/snippets.md)")
            pasted = RUN_AS_PASTED.fullmatch(lines[line - 2]) if line >= 2 else None
            if pasted:
                elsewhere.append(RunElsewhere(page, line, lang, pasted.group(1), pasted.group(2)))
                continue
            if lang == "text" and info == "output":
                if not found or found[-1].expected is not None or text[found[-1].end:start].strip():
                    raise Unplaced("an output block must follow its snippet")
                found[-1].expected = code
                continue
            m = re.match(r"doc-only\b(:?)\s*(.*)", info)
            if m:
                if lang in RUNNABLE:
                    raise Unplaced(f"a {lang} block runs, or says why not with `no-run: REASON`")
                if not m.group(1) or not m.group(2).strip():
                    raise Unplaced("`doc-only` needs what the block is: `doc-only: WHAT`")
                continue
            s = Snippet(page, line, "sh" if lang == "bash" else lang, info, code)
        except Unplaced as e:
            problems.append((page, line, str(e)))
            continue
        s.end = end
        found.append(s)
    return found


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def broken_links(page):
    """The relative links of PAGE whose file, or heading in a Markdown file, does not exist."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    bad = []
    for target in re.findall(r"\]\(([^)\s]*)\)", text):
        if not target or re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(target)
        elif anchor and file.suffix == ".md":
            if anchor not in {slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(), re.M)}:
                bad.append(target)
    return bad


FUNCTIONS_SQL = """
SELECT p.proname, coalesce(array_to_string(p.proargnames[1:p.pronargs], ','), ''),
       p.pronargdefaults
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem')
  AND p.pronamespace <> 'idem'::regnamespace   -- internals
ORDER BY 1, 2"""


def reference_checks(srv):
    """docs/functions.md and docs/settings.md against the declarations of the installed pg_idem:
    every function (each overload) has a signature in backticks with its arguments' names in
    order and DEFAULT on exactly those that have one; every function the page names exists;
    every setting is in the native table with the default SHOW gives and its context."""
    results = []
    db = "doc_reference"
    srv.psql("postgres", f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db};")
    srv.psql(db, "CREATE EXTENSION pg_idem;")
    q = subprocess.run([str(BINDIR / "psql"), "-X", "-A", "-t", "-F", "|", "-d", db, "-c", FUNCTIONS_SQL],
                       env=srv.env, stdout=subprocess.PIPE, text=True, check=True).stdout
    declared = [line.split("|") for line in q.strip().split("\n") if line]
    page = ROOT / "docs" / "functions.md"
    text = page.read_text()
    documented = [(m.group(1), m.group(2)) for m in re.finditer(r"`(idem_\w+)\(([^)`]*)\)", text, re.S)]
    for name, args, ndefaults in declared:
        names = [a for a in args.split(",") if a]
        want = (names, names[len(names) - int(ndefaults):] if int(ndefaults) else [])
        found = False
        for dname, dargs in documented:
            if dname != name:
                continue
            items = [" ".join(i.split()) for i in dargs.split(",") if i.strip()]
            got = ([i.split()[0] for i in items], [i.split()[0] for i in items if "DEFAULT" in i])
            if got == want:
                found = True
        results.append((f"docs/functions.md: {name}({', '.join(names)})", found,
                        "no signature in backticks with these arguments and defaults ("
                        + (", ".join(want[1]) or "none") + ")"))
    known = {d[0] for d in declared}
    unknown = sorted({n for n, _ in documented} - known)
    results.append(("docs/functions.md: names only declared functions", not unknown,
                    "not declared: " + ", ".join(unknown)))
    settings = (ROOT / "docs" / "settings.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r"^\| `(pg_idem\.\w+)` \| `([^`]*)` \| ([^|]*) \|", settings, re.M)}
    q = subprocess.run([str(BINDIR / "psql"), "-X", "-A", "-t", "-F", "|", "-d", db, "-c",
                        "SELECT name, context FROM pg_settings WHERE name LIKE 'pg_idem.%' ORDER BY 1"],
                       env=srv.env, stdout=subprocess.PIPE, text=True, check=True).stdout
    for line in q.strip().split("\n"):
        name, context = line.split("|")
        shown = subprocess.run([str(BINDIR / "psql"), "-X", "-A", "-t", "-d", db, "-c", f"SHOW {name}"],
                               env=srv.env, stdout=subprocess.PIPE, text=True).stdout.strip()
        doc = rows.pop(name, None)
        ok = doc is not None and doc[0] == shown and doc[1].split(",")[0].strip() == context
        results.append((f"docs/settings.md: {name}", ok,
                        f"the page says {doc}, the server {shown!r} ({context})"))
    results.append(("docs/settings.md: names only real settings", not rows,
                    "not settings: " + ", ".join(rows)))
    # every SQLSTATE the golden error tests see pg_idem raise is a row of docs/errors.md
    golden = (ROOT / "tests" / "pg_regress" / "expected" / "errors.out").read_text()
    codes = sorted(set(re.findall(r"^code +\| ([0-9A-Z]{5})$", golden, re.M)))
    table = " ".join(re.findall(r"^\| ([^|]*) \|", (ROOT / "docs" / "errors.md").read_text(), re.M))
    for code in codes:
        listed = code in table or f"{code[:2]}xxx" in table
        results.append((f"docs/errors.md: {code}", listed,
                        "raised in tests/pg_regress/expected/errors.out, not in the table"))
    return results


def matches(expected, actual):
    exp = [line.rstrip() for line in expected.strip("\n").split("\n")]
    act = [line.rstrip() for line in actual.strip("\n").split("\n")]
    if len(exp) != len(act):
        return False
    for e, a in zip(exp, act):
        pattern = "".join(".*?" if re.fullmatch(r"<[^<>]*>", part) else re.escape(part)
                          for part in re.split(r"(<[^<>]*>)", e))
        if not re.fullmatch(pattern, a):
            return False
    return True


def run(argv, **kw):
    if os.getuid() == 0:
        argv = ["runuser", "-u", "postgres", "--"] + argv
    return subprocess.run(argv, **kw)


class Server:
    def __init__(self, extra):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="pg_idem_docs."))
        os.chmod(self.dir, 0o777)
        run([str(BINDIR / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C.UTF-8"], check=True, stdout=subprocess.DEVNULL)
        conf = (self.dir / "data" / "postgresql.conf").read_text()
        for attempt in range(5):  # another process may take the port between the check and the start
            self.port = free_port()
            (self.dir / "data" / "postgresql.conf").write_text(
                conf + f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\nlc_messages = 'C'\ntimezone = 'UTC'\n"
                + "".join(line + "\n" for line in extra))
            started = run([str(BINDIR / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.dir / "log"),
                           "-w", "-t", "60", "start"], stdout=subprocess.DEVNULL)
            if started.returncode == 0:
                break
        else:
            raise SystemExit("could not start a server:\n" + (self.dir / "log").read_text()[-2000:])
        self.env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(self.port), PGUSER="postgres",
                        PGDATABASE="postgres", PATH=f"{BINDIR}:{os.environ['PATH']}")
        self.env.pop("RUST_BACKTRACE", None)

    def psql(self, db, script):
        return subprocess.run([str(BINDIR / "psql"), "-X", "-q", "-d", db, "-v", "ON_ERROR_STOP=0",
                               "-v", "VERBOSITY=default", "-f", "-"], input=script, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env)

    def stop(self):
        run([str(BINDIR / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    ports = list(range(59000, 60000))
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit("no free port in 59000-59999")


def sql_edition_file(tmp):
    out = tmp / "sql-edition"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "sql_edition.py"), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return next(p for p in out.glob("pg_idem--*.sql") if not p.name.endswith(".tle.sql") and "--" not in p.name[9:])


def main():
    pages = [pathlib.Path(p).resolve() for p in sys.argv[1:]] or default_pages()
    problems = []  # (page, line, why): fences it cannot place, each a failure
    elsewhere = []  # blocks run as pasted by another suite: reported, not counted
    every = [s for p in pages for s in snippets(p, problems, elsewhere)]
    results = [(s, "elsewhere", s.why) for s in elsewhere]  # (snippet, ok, why)
    servers = {}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="pg_idem_docs_files."))
    os.chmod(tmp, 0o755)

    def server(edition):
        if edition not in servers:
            conf = ["shared_preload_libraries = 'pg_idem'", "pg_idem.database = 'postgres'"] \
                if edition == "native" else []
            servers[edition] = Server(conf)
        return servers[edition]

    try:
        edition_file = None
        for page in pages:
            page_snippets = [s for s in every if s.page == page]
            for s in page_snippets:
                if s.no_run:
                    results.append((s, None, s.no_run))
            for edition in ("native", "sql"):
                group = [s for s in page_snippets if not s.no_run and s.lang == "sql" and s.edition == edition]
                if not group:
                    continue
                srv = server(edition)
                db = "doc_" + re.sub(r"\W", "_", page.stem.lower())
                srv.psql("postgres", f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db};")
                script = []
                if edition == "sql":
                    if edition_file is None:
                        edition_file = sql_edition_file(tmp)
                    script.append(f"BEGIN;\n\\i {edition_file}\nCOMMIT;")
                for i, s in enumerate(group):
                    script.append(f"\\echo {MARK} {i}")
                    if s.setup:
                        script.append(f"\\i {SETUP / (s.setup + '.sql')}")
                        script.append(f"\\echo {MARK} {i} snippet")
                    script.append(s.code)
                script.append(f"\\echo {MARK} end")
                out = srv.psql(db, "\n".join(script) + "\n").stdout
                # errors read as in an interactive session, without the script's line number
                out = re.sub(r"^psql:<stdin>:\d+: ", "", out, flags=re.M)
                parts = re.split(rf"^{MARK} (\S+)(?: snippet)?\n", out, flags=re.M)
                chunks = {}
                for k in range(1, len(parts) - 1, 2):
                    chunks[parts[k]] = parts[k + 1]  # a setup's own output is overwritten by the snippet's
                if "end" not in chunks and edition_file is not None and edition == "sql":
                    pass
                for i, s in enumerate(group):
                    got = chunks.get(str(i))
                    if got is None:
                        results.append((s, False, "psql stopped before it:\n" + out[-2000:]))
                    elif s.error and "ERROR:" not in got:
                        results.append((s, False, "it should raise an error and did not:\n" + got))
                    elif not s.error and ("ERROR:" in got or "FATAL:" in got):
                        results.append((s, False, got))
                    elif s.expected is not None and not matches(s.expected, got):
                        results.append((s, False, "the output differs from the page's:\n--- page\n"
                                        + s.expected + "--- got\n" + got))
                    else:
                        results.append((s, True, ""))
            for s in page_snippets:
                if s.no_run or s.lang != "sh":
                    continue
                srv = server(s.edition)
                work = pathlib.Path(tempfile.mkdtemp(prefix="snippet.", dir=tmp))
                os.chmod(work, 0o777)
                env = dict(srv.env, PG_IDEM_ROOT=str(ROOT), PG_IDEM_DOCS_TMP=str(tmp))
                code = s.code
                if s.setup:
                    code = f"set -e\nsource {SETUP / (s.setup + '.sh')}\nset +e\n" + code
                p = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                got = p.stdout
                if s.error != (p.returncode != 0):
                    results.append((s, False, f"exit {p.returncode}:\n{got}"))
                elif s.expected is not None and not matches(s.expected, got):
                    results.append((s, False, "the output differs from the page's:\n--- page\n"
                                    + s.expected + "--- got\n" + got))
                else:
                    results.append((s, True, ""))
        reference = reference_checks(server("native")) if not sys.argv[1:] else []
    finally:
        for srv in servers.values():
            srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    links = []
    for name, ok, why in reference:
        links.append((name, ok, [why]))
    for page in pages:
        bad = broken_links(page)
        links.append((page, not bad, bad))
    results.sort(key=lambda r: (str(r[0].page), r[0].line))
    for s, ok, why in results:
        status = "skipped" if ok is None else "external" if ok == "elsewhere" else "ok" if ok else "FAILED"
        print(f"{status:8} {s.where} ({s.lang}{', ' + s.edition if s.lang == 'sql' else ''})"
              + (f": {why}" if ok is None or ok == "elsewhere" else ""))
        if ok is False:
            print("    " + why.replace("\n", "\n    "))
    for page, line, why in sorted(problems, key=lambda p: (str(p[0]), p[1])):
        print(f"FAILED   {page.relative_to(ROOT)}:{line}: {why}")
    for page, ok, bad in links:
        if isinstance(page, str):
            print(f"{'ok' if ok else 'FAILED':8} {page}" + ("" if ok else ": " + bad[0]))
            continue
        print(f"{'ok' if ok else 'FAILED':8} {page.relative_to(ROOT)}: links" + ("" if ok else ": broken: " + ", ".join(bad)))
    p = sum(1 for r in results if r[1] is True) + sum(1 for link in links if link[1])
    f = sum(1 for r in results if r[1] is False) + sum(1 for link in links if not link[1]) + len(problems)
    k = sum(1 for r in results if r[1] is None)
    for s, ok, why in results:
        if ok is None and os.environ.get("PG_IDEM_SKIP_LOG"):
            with open(os.environ["PG_IDEM_SKIP_LOG"], "a") as log:
                log.write(f"SKIPPED: docs::{s.where}: {why}\n")
    print(f"{p + k} passed, {f} failed, {k} skipped" if os.environ.get("PG_IDEM_SKIP_LOG")
          else f"{p} passed, {f} failed, {k} skipped")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main())
