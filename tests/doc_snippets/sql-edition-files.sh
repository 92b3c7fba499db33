# shellcheck shell=bash
# The set-up of the SQL edition's install snippets: the files `scripts/package.sh sql` writes, in
# the current directory, and a database `app` owned by a role `app_owner` that is no superuser.
python3 "$PG_IDEM_ROOT/scripts/sql_edition.py" --out . >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -c 'DROP DATABASE IF EXISTS app' -c 'DROP ROLE IF EXISTS app_owner' \
    -c 'CREATE ROLE app_owner LOGIN' -c 'CREATE DATABASE app OWNER app_owner'
