#!/usr/bin/env python3
"""The architecture, checked (python3, standard library only).

1. The layers of src/: src/lib.rs's doc comment lists them, top to bottom, as a list of
   bullets. The head of a bullet (its text before the first colon outside backticks) names its
   layers in backticks; several names on one bullet sit side by side. A layer may use only the
   layers of the bullets after its own: every `crate::<module>` path (use declarations, grouped
   ones included, and paths in code) and every `super::`/`self::` path that resolves to another
   top-level module is checked against that order, and each use of a layer that is not below
   is reported as `file:line: <layer> uses <layer>`. Every file module src/lib.rs declares
   (`mod x;`) must be in the list, and the list may name only those.
2. No module cycles in clients/rust/src: the graph of its files' `crate::x`/`super::x` paths
   (names the crate root re-exports count as the module they come from) must have none.

Comments, string and character literals are blanked before anything is read, so a path in a
doc comment or in SQL text counts for nothing.

Usage: scripts/check_layers.py             the self-test, then the repository (exit 1: violations)
       scripts/check_layers.py --self-test  the self-test only
       scripts/check_layers.py --graph      also print src/'s module graph
"""

import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERED = "src"
ACYCLIC = ["clients/rust/src"]

IDENT = re.compile(r"r#[A-Za-z_][A-Za-z0-9_]*|\$?[A-Za-z_][A-Za-z0-9_]*")
PATH_STARTS = {"crate", "$crate", "super", "self"}
RAW_STRING = re.compile(r'b?r(#*)"')
# a character literal ('a', '\n', '\u{7f}', '\''); a quote that starts none is a lifetime or label
CHAR = re.compile(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


# ---------------------------------------------------------------------------------------------
# reading Rust


def blank(text):
    """`text` with comments, strings and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def keep_lines(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_lines(text[i:j]))
            i = j
        elif (m := RAW_STRING.match(text, i)) and not _after_ident(text, i):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_lines(text[i:j]))
            i = j
        elif c == '"' or (text.startswith('b"', i) and not _after_ident(text, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(keep_lines(text[i:j]))
            i = j
        elif c == "'":
            if m := CHAR.match(text, i):
                out.append(" " * (m.end() - i))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _after_ident(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def tokens(code):
    """(token, line) of blanked code: identifiers (`$crate` one), `::`, and single characters."""
    out, line, i, n = [], 1, 0, len(code)
    while i < n:
        c = code[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif m := IDENT.match(code, i):
            out.append((m.group(0), line))
            i = m.end()
        elif code.startswith("::", i):
            out.append(("::", line))
            i += 2
        else:
            out.append((c, line))
            i += 1
    return out


def _is_ident(tok):
    return bool(IDENT.fullmatch(tok))


def paths(text, modpath):
    """Every path of a file that starts at `crate`, `super` or `self` (at the crate root: at any
    name), as (absolute segments, line, imported name or None), given the file's module path.
    Use declarations are expanded (`use a::{b, c::d}`: a::b and a::c::d); inline `mod x { }`
    blocks extend the module path of what they hold."""
    toks = tokens(blank(text))
    found = []
    depth = 0
    inline = []  # (name, depth inside its braces)
    i, n = 0, len(toks)

    def here():
        return list(modpath) + [name for name, _ in inline]

    def resolve(segs):
        """The absolute path of `segs`, and the index in `segs` of its first segment (None when
        that comes from the module path, as in `super::*` or `self::x`)."""
        cur = here()
        if not segs:
            return None, None
        first = segs[0]
        if first in ("crate", "$crate"):
            return segs[1:], 1
        if first == "super":
            k = 0
            while k < len(segs) and segs[k] == "super":
                if not cur:
                    return None, None
                cur.pop()
                k += 1
            return cur + segs[k:], (None if cur else k)
        if first == "self":
            return cur + segs[1:], (None if cur else 1)
        if not cur:  # the crate root: `use pg::guc` names the module pg
            return segs, 0
        return None, None

    def use_tree(i, prefix, lines):
        """Parses one use tree at toks[i]; returns the index after it."""
        segs, lines = list(prefix), list(lines)
        while i < n:
            tok, ln = toks[i]
            if tok == "{":
                i += 1
                while i < n and toks[i][0] != "}":
                    i = use_tree(i, segs, lines)
                    if i < n and toks[i][0] == ",":
                        i += 1
                return i + 1
            if tok == "*":
                record(segs, lines + [ln], None)
                return i + 1
            if _is_ident(tok) and tok != "as":
                segs.append(tok)
                lines.append(ln)
                i += 1
                if i < n and toks[i][0] == "::":
                    i += 1
                    continue
                name = segs[-1]
                if i + 1 < n and toks[i][0] == "as":
                    name = toks[i + 1][0]
                    i += 2
                if name == "self":  # use a::{self}: imports a
                    segs, lines, name = segs[:-1], lines[:-1], segs[-2] if len(segs) > 1 else None
                record(segs, lines, name)
                return i
            if tok == "::":  # a leading ::
                i += 1
                continue
            return i + 1

    def record(segs, lines, name):
        absolute, k = resolve(segs)
        if absolute is not None:
            # the line of the segment that names the top-level module
            line = lines[min(k, len(lines) - 1)] if k is not None else lines[0]
            found.append((absolute, line, name))

    while i < n:
        tok, line = toks[i]
        nxt = toks[i + 1][0] if i + 1 < n else None
        starts_path = i == 0 or toks[i - 1][0] != "::"
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            while inline and inline[-1][1] > depth:
                inline.pop()
        elif tok == "mod" and nxt and _is_ident(nxt) and i + 2 < n and toks[i + 2][0] == "{":
            inline.append((nxt, depth + 1))
            depth += 1
            i += 3
            continue
        elif tok == "use" and starts_path and nxt != "<":  # not `impl Trait + use<'a>`
            j = i + 1
            while j < n and toks[j][0] != ";":
                j = use_tree(j, [], [])
            i = j + 1
            continue
        elif tok in PATH_STARTS and nxt == "::" and starts_path:
            segs, lines, j = [tok], [line], i
            while j + 2 < n and toks[j + 1][0] == "::" and _is_ident(toks[j + 2][0]):
                segs.append(toks[j + 2][0])
                lines.append(toks[j + 2][1])
                j += 2
            record(segs, lines, None)
            i = j + 1
            continue
        i += 1
    return found


def file_modules(files, root_file):
    """The module path of each .rs file of a crate (relative names -> list), the root's is []."""
    out = {}
    for rel in files:
        if rel == root_file:
            out[rel] = []
            continue
        parts = rel[:-3].split("/")
        if parts[-1] == "mod":
            parts = parts[:-1]
        out[rel] = parts
    return out


def declared_modules(root_text):
    """The file modules the crate root declares (`mod x;`, any visibility and attributes)."""
    toks = tokens(blank(root_text))
    mods = []
    for k in range(len(toks) - 2):
        if toks[k][0] == "mod" and _is_ident(toks[k + 1][0]) and toks[k + 2][0] == ";":
            mods.append(toks[k + 1][0])
    return mods


def graph(files, root_file):
    """Uses between top-level modules: a list of (from, to, file, line). `files`: relative
    name -> text. Names the root imports (`use x::Name`, `pub use crate::x::Name`) count as x."""
    mods = file_modules(files, root_file)
    top = set(declared_modules(files[root_file]))
    reexports = {}
    for absolute, _, name in paths(files[root_file], []):
        if absolute and absolute[0] in top and name and len(absolute) > 1:
            reexports[name] = absolute[0]
    edges = []
    for rel in sorted(files):
        if rel == root_file or not mods[rel]:
            continue
        src = mods[rel][0]
        for absolute, line, _ in paths(files[rel], mods[rel]):
            if not absolute:
                continue
            dst = absolute[0] if absolute[0] in top else reexports.get(absolute[0])
            if dst and dst != src and (src, dst, rel, line) not in edges:
                edges.append((src, dst, rel, line))
    return edges


# ---------------------------------------------------------------------------------------------
# the layer list


def layer_list(root_text):
    """The layers of the first bullet list of the crate root's `//!` doc comment, top to bottom:
    a list of lists (one per bullet; more than one name: side by side)."""
    doc = []
    for line in root_text.splitlines():
        s = line.strip()
        if s.startswith("//!"):
            doc.append(s[3:].removeprefix(" "))
        elif s and doc:
            break
    bullets, current = [], None
    for line in doc:
        if line.startswith("- "):
            current = [line[2:]]
            bullets.append(current)
        elif current is not None and line.startswith("  "):
            current.append(line.strip())
        elif bullets:
            break
    layers = []
    for bullet in bullets:
        text = " ".join(bullet)
        head = _head(text)
        names = re.findall(r"`([^`]+)`", head)
        if not names:
            raise ValueError(f"a layer bullet names no layer before its colon: {text[:60]!r}")
        layers.append(names)
    return layers


def _head(text):
    inside = False
    for k, c in enumerate(text):
        if c == "`":
            inside = not inside
        elif c == ":" and not inside:
            return text[:k]
    return text


def check_layers(files, root_file, prefix=""):
    """Problems of a layered crate, as lines `file:line: layer uses layer`."""
    layers = layer_list(files[root_file])
    rank = {}
    problems = []
    for k, names in enumerate(layers):
        for name in names:
            if name in rank:
                problems.append(f"{prefix}{root_file}: `{name}` is listed twice in the layers")
            rank[name] = k
    declared = declared_modules(files[root_file])
    for name in declared:
        if name not in rank:
            problems.append(f"{prefix}{root_file}: module `{name}` is in no layer of the doc")
    for name in rank:
        if name not in declared:
            problems.append(f"{prefix}{root_file}: the layers name `{name}`, which is no module")
    for src, dst, rel, line in graph(files, root_file):
        if src in rank and dst in rank and rank[dst] <= rank[src]:
            beside = " (side by side)" if rank[dst] == rank[src] else ""
            problems.append(f"{prefix}{rel}:{line}: {src} uses {dst}{beside}")
    return problems


# ---------------------------------------------------------------------------------------------
# cycles


def check_cycles(files, root_file, prefix=""):
    """Module cycles of a crate, one line each: `cycle a -> b -> a (file:line, ...)`."""
    edges = graph(files, root_file)
    out = {}
    where = {}
    for src, dst, rel, line in edges:
        out.setdefault(src, set()).add(dst)
        where.setdefault((src, dst), f"{prefix}{rel}:{line}")
    problems = []
    for component in _strongly_connected(out):
        if len(component) < 2:
            continue
        cycle = _a_cycle(sorted(component)[0], out, set(component))
        hops = ", ".join(f"{where[(a, b)]}: {a} uses {b}" for a, b in zip(cycle, cycle[1:]))
        crate = prefix.rstrip("/") + ": " if prefix else ""
        problems.append(f"{crate}cycle {' -> '.join(cycle)} ({hops})")
    return problems


def _strongly_connected(out):
    index, low, stack, on, result = {}, {}, [], set(), []
    nodes = sorted(set(out) | {d for ds in out.values() for d in ds})

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(out.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            result.append(component)

    for v in nodes:
        if v not in index:
            visit(v)
    return result


def _a_cycle(start, out, within):
    """A shortest cycle through `start` inside one strongly connected component."""
    paths_ = [[start]]
    seen = {start}
    while paths_:
        nxt = []
        for p in paths_:
            for w in sorted(out.get(p[-1], ())):
                if w == start:
                    return p + [start]
                if w in within and w not in seen:
                    seen.add(w)
                    nxt.append(p + [w])
        paths_ = nxt
    return [start, start]


# ---------------------------------------------------------------------------------------------
# the repository


def read_crate(directory, skip=("bin",)):
    files = {}
    for base, dirs, names in os.walk(directory):
        here = os.path.relpath(base, directory)
        dirs[:] = sorted(d for d in dirs if os.path.normpath(os.path.join(here, d)) not in skip)
        for name in names:
            if name.endswith(".rs"):
                full = os.path.join(base, name)
                with open(full, encoding="utf-8") as f:
                    files[os.path.relpath(full, directory).replace(os.sep, "/")] = f.read()
    return files


def check_repository(show_graph=False):
    problems = []
    files = read_crate(os.path.join(ROOT, LAYERED))
    try:
        problems += check_layers(files, "lib.rs", prefix=LAYERED + "/")
    except ValueError as e:
        problems.append(f"{LAYERED}/lib.rs: {e}")
    if show_graph:
        uses = {}
        for src, dst, _, _ in graph(files, "lib.rs"):
            uses.setdefault(src, set()).add(dst)
        for src in sorted(uses):
            print(f"{src} -> {', '.join(sorted(uses[src]))}")
    for directory in ACYCLIC:
        crate = read_crate(os.path.join(ROOT, directory))
        problems += check_cycles(crate, "lib.rs", prefix=directory + "/")
    return problems


# ---------------------------------------------------------------------------------------------
# the self-test: what must be reported, on small crates in memory

LIB = """//! A crate.
//!
//! - `top`: the top; it names `low` after its colon, which puts nothing beside it.
//! - `mid_a` and `mid_b`, side by side: the middle (`mid_a::x`,
//!   `mid_b::y`).
//! - `low`: the bottom.
//!
//! Prose after the list: - `not_a_layer`: ignored.

mod low;
pub(crate) mod mid_a;
#[cfg(test)]
mod mid_b;
mod top;
mod tests { }

pub use crate::low::Exported;
use top::{self as t, Up};
"""

# (what, {file: text} over a crate of LIB and empty modules, the lines check_layers must print)
LAYER_CASES = [
    ("downward uses are fine", {
        "top.rs": """
            use crate::mid_a::x;
            use crate::{low, mid_b::y};
            fn f() { crate::low::g(); }
            """,
        "mid_a/inner.rs": "use crate::low::Thing;\nuse super::sibling;\n",
    }, []),
    ("an upward use", {
        "low.rs": "use crate::errors;\n\nuse crate::top::Thing;\n",
    }, ["low.rs:3: low uses top"]),
    ("grouped uses, on one line and on several", {
        "low.rs": """
            use crate::{mid_a::x, low::y};
            use crate::{
                self as c,
                top::{
                    a, b},
            };
            """,
    }, ["low.rs:1: low uses mid_a", "low.rs:4: low uses top"]),
    ("paths in code, turbofish, lifetimes, `use<'a>`", {
        "mid_a/deep.rs": """
            fn f<'a>(s: &'a str) -> impl Sized + use<'a> {
                let c = 'x';
                crate::top::go::<u8>(s);
                c
            }
            """,
    }, ["mid_a/deep.rs:3: mid_a uses top"]),
    ("side by side", {
        "mid_b.rs": "pub fn f() { crate::mid_a::g() }\n",
    }, ["mid_b.rs:1: mid_b uses mid_a (side by side)"]),
    ("super:: escapes and inline modules", {
        "low/a/b.rs": """
            use super::super::super::top::x;
            mod tests {
                use super::*;
                use super::super::super::super::mid_b;
            }
            """,
        "low.rs": "mod inner { use super::super::top; }\nuse self::inner::z;\n",
    }, ["low/a/b.rs:1: low uses top", "low/a/b.rs:4: low uses mid_b", "low.rs:1: low uses top"]),
    ("comments, strings and characters are no uses", {
        "low.rs": r"""
            //! crate::top
            /// `crate::top::x`
            /* crate::top /* nested */ crate::top */
            const S: &str = "crate::top::x \" crate::top";
            const R: &str = r#"use crate::top; "quoted" crate::top"#;
            const B: &[u8] = b"crate::top";
            const C: char = '"';
            const Q: char = '\'';
            fn f() { crate::low::g() }
            """,
    }, []),
    ("a name the root imports is its module's", {
        "mid_b.rs": "use crate::Exported;\n",
        "low.rs": "use crate::Exported;\nfn f() { crate::Up::new(); crate::t::g() }\n",
    }, ["low.rs:2: low uses top"]),
    ("a module in no layer", {
        "lib.rs": LIB.replace("mod top;", "mod top;\nmod stray;"),
        "stray.rs": "",
    }, ["lib.rs: module `stray` is in no layer of the doc"]),
]

CYCLIC = {
    "lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\npub use crate::f::Public;\n",
    "a.rs": "use crate::b::X;\n",
    "b.rs": "use crate::{c::Y, d};\n",
    "c.rs": "fn f() {\n    super::a::z()\n}\n",
    "d.rs": "",
    "e.rs": "use crate::Public;\n",
    "f.rs": "pub struct Public;\nfn g() { crate::e::h() }\n",
}


def _self_test():
    failures = []

    def expect(name, got, wanted):
        if sorted(got) != sorted(wanted):
            failures.append(f"{name}:\n  wanted {sorted(wanted)}\n  got    {sorted(got)}")

    expect("the list", layer_list(LIB), [["top"], ["mid_a", "mid_b"], ["low"]])
    for name, changed, wanted in LAYER_CASES:
        files = {"lib.rs": LIB, "low.rs": "", "mid_a/mod.rs": "", "mid_b.rs": "", "top.rs": ""}
        files.update({f: textwrap.dedent(t).removeprefix("\n") for f, t in changed.items()})
        expect(name, check_layers(files, "lib.rs"), wanted)
    expect("cycles, through super:: and a re-export", check_cycles(CYCLIC, "lib.rs"), [
        "cycle a -> b -> c -> a (a.rs:1: a uses b, b.rs:1: b uses c, c.rs:2: c uses a)",
        "cycle e -> f -> e (e.rs:1: e uses f, f.rs:2: f uses e)",
    ])
    acyclic = dict(CYCLIC, **{"c.rs": "", "f.rs": "pub struct Public;\n"})
    expect("no cycle", check_cycles(acyclic, "lib.rs"), [])
    return failures


def main(argv):
    failures = _self_test()
    for failure in failures:
        print(f"check_layers.py self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    if "--self-test" in argv:
        print("check_layers.py: self-test passed")
        return 0
    problems = check_repository(show_graph="--graph" in argv)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
