"""ruff and mypy clean. (The sdist and the wheel: clients/python/pack.sh builds them,
clients/release-check.sh checks them installed in a clean place.)"""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[1]  # clients/python
BIN = pathlib.Path(sys.executable).parent


def run(*argv: str, cwd: pathlib.Path = HERE) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_ruff():
    run(str(BIN / "ruff"), "check", "src", "tests")


def test_mypy():
    run(str(BIN / "mypy"))
