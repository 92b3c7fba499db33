# shellcheck shell=bash
# The set-up of README.md's one-minute trial: the snippet runs from a clone (the repository's
# root), and its files go to the runner's scratch directory instead of /tmp.
export TMPDIR="$PWD"
cd "$PG_IDEM_ROOT" || exit 1
