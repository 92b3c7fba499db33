"""Contract 2: an app refuses to start, with a message that says what to do, on a database where
it cannot call pg_idem safely (run.sh prepares them with the SQL edition): pg_idem missing, a
version below the contract's minimum or none at all (no idem_version()), or an idem_* function another role planted in pg_idem's
schema. Each reference app runs the package's check when it starts (clients/CONTRACT.md)."""

import os
import subprocess

import pytest
from conftest import APPS, CONTRACT, LOGS, ROOT, SELECTED, free_port

CASES = {
    "EMPTY": ["pg_idem is not installed"],
    "OLD": ["0.4.0", CONTRACT["min_pg_idem_version"]],
    "PLANTED": ["idem_claim(integer)"],
    "NOVERSION": [CONTRACT["min_pg_idem_version"]],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("app", SELECTED)
def test_an_app_refuses_to_start_where_pg_idem_cannot_be_trusted(app, case):
    dsn = os.environ.get(f"PG_IDEM_HTTP_DSN_{case}")
    if not dsn:
        pytest.skip("needs the sql mode's server (run.sh --mode sql)")
    argv = [a.replace("{dsn}", dsn).replace("{port}", str(free_port())) for a in APPS[app]]
    LOGS.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{app} did not exit within 60 s on the {case} database")
    output = (done.stdout + done.stderr).decode(errors="replace")
    (LOGS / f"{app}-startup-{case}.log").write_text(output)
    assert done.returncode != 0, output[-2000:]
    for words in CASES[case]:
        assert words in output, (words, output[-2000:])


def test_every_case_is_prepared_by_run_sh():
    script = (ROOT / "clients" / "conformance" / "run.sh").read_text()
    assert all(f"PG_IDEM_HTTP_DSN_{case}" in script for case in CASES)
