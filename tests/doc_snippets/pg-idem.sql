-- The set-up of docs/troubleshooting.md's snippets: pg_idem in the page's (empty) database.
CREATE EXTENSION IF NOT EXISTS pg_idem;
