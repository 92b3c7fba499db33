"""A pytest plugin (`-p pytest_plain_summary`, with clients/ on PYTHONPATH): ends the run with the
plain line "N passed, N failed, N skipped" that clients/test.sh and scripts/test.sh count
(pytest's own closing line is decorated and names only what happened)."""


def pytest_terminal_summary(terminalreporter):
    stats = terminalreporter.stats
    passed = len(stats.get("passed", []))
    failed = len(stats.get("failed", [])) + len(stats.get("error", []))
    skipped = len(stats.get("skipped", []))
    terminalreporter.write_line(f"{passed} passed, {failed} failed, {skipped} skipped")
