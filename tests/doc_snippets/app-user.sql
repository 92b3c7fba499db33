-- The role docs/settings.md's SQL-edition snippet gives settings to (roles are the cluster's:
-- it may exist from another page already).
SELECT pg_catalog.count(*) FROM pg_catalog.pg_roles WHERE rolname = 'app_user' \gset
\if :count
\else
CREATE ROLE app_user LOGIN;
\endif
