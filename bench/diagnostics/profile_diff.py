#!/usr/bin/env python3
"""Instructions per transaction of each function, from two callgrind profiles of the same
scenario that differ only in the number of transactions
(bench/diagnostics/sql_edition_instructions.py --profile DIR keeps them as DB-SCENARIO-0.callgrind
and DB-SCENARIO-N.callgrind): what N more transactions cost, function by function, start-up and
warm-up left out.

    python3 bench/diagnostics/profile_diff.py /tmp/prof/sqled-pg_idem-0.callgrind /tmp/prof/sqled-pg_idem-300.callgrind 300
    python3 bench/diagnostics/profile_diff.py A B N --self      # exclusive counts instead of inclusive

Needs callgrind_annotate (valgrind). Static functions of a server without debug symbols show
as addresses.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def per_function(path: str, inclusive: bool) -> dict[str, int]:
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m and ":" in m.group(2) and "PROGRAM TOTALS" not in line:
            # callgrind names recursion levels fn'2, fn'3: one function. Its own instructions are
            # those of every level; its inclusive ones are the outermost level's (which contain
            # the inner ones)
            name = re.sub(r"'\d+", "", m.group(2))
            n = int(m.group(1).replace(",", ""))
            if not inclusive:
                counts[name] = counts.get(name, 0) + n
            elif name == m.group(2) or name not in counts:
                counts[name] = n
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("n", type=int, help="how many more transactions `after` ran")
    p.add_argument("--self", action="store_true", help="exclusive counts")
    p.add_argument("--top", type=int, default=60)
    args = p.parse_args()
    a, b = per_function(args.before, not args.self), per_function(args.after, not args.self)
    rows = sorted(((b.get(f, 0) - a.get(f, 0)) / args.n, f) for f in set(a) | set(b))
    for cost, name in reversed(rows[-args.top:]):
        print(f"{cost / 1000:10.1f}k  {name[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
