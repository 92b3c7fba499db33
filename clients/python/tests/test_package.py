"""The package as published: ruff and mypy clean, and an sdist and a wheel that build, the
wheel installing into a fresh venv where the package imports with its contract.json."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

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


def test_sdist_and_wheel_build_and_the_wheel_installs(tmp_path):
    # from a copy: the build's own files stay out of the work tree
    source = tmp_path / "source"
    shutil.copytree(HERE, source, ignore=shutil.ignore_patterns(
        ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"))
    # --no-isolation: the dev venv's setuptools, so the step needs no download
    run(sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel",
        "--outdir", str(tmp_path / "dist"), cwd=source)
    wheel = next((tmp_path / "dist").glob("pg_idem_http-*.whl"))
    assert next((tmp_path / "dist").glob("pg_idem_http-*.tar.gz"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "pg_idem_http/contract.json" in names and "pg_idem_http/py.typed" in names
    assert "License-Expression: PostgreSQL" in meta
    assert not any("uvicorn" in line for line in meta.splitlines()
                   if line.startswith("Requires-Dist")), "no extra installs a server"
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    # the core imports without its dependencies: --no-deps keeps this offline and fast
    run(str(BIN / "pip"), "--python", str(venv / "bin" / "python"), "install", "-q",
        "--no-deps", "--disable-pip-version-check", str(wheel))
    out = run(str(venv / "bin" / "python"), "-c",
              "import pg_idem_http; print(pg_idem_http.__file__, pg_idem_http.CONTRACT"
              "['contract_version'])", cwd=tmp_path)
    assert str(venv) in out and out.split()[-1] == "2"
