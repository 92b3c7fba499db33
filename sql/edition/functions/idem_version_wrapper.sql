-- language: sql
-- the version of this install: scripts/sql_edition.py writes it in
SELECT '@PG_IDEM_VERSION@'::pg_catalog.text
