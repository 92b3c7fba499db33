-- The set-up of docs/security.md's tenant-boundary snippet: pg_idem in the page's (empty)
-- database, the two service roles it grants tenants to, and the database `app` it turns the
-- boundary on in (roles and databases are the cluster's: they may exist from another page).
CREATE EXTENSION IF NOT EXISTS pg_idem;
SELECT 'CREATE ROLE ' || r || ' LOGIN' FROM unnest(ARRAY['payments_svc', 'orders_svc']) AS r
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) \gexec
SELECT 'CREATE DATABASE app' WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = 'app') \gexec
