//! Tenants as an access boundary (opt-in: pg_idem.tenant_grants). With the setting off, any role
//! that may call the functions acts on any tenant, which suits one application per database.
//! With it on, a role acts only on the tenants granted to it, or to a role whose privileges it
//! has, in idem.tenant_grants; superusers act on every tenant.
//!
//! - `access`: the check every SQL function makes before it touches a key (`check_access`), the
//!   tenants a restricted role may purge (`purgeable_tenants`), and the per-backend cache of
//!   answers (`announce_change` tells every backend the grants changed). The SQL functions that
//!   grant and revoke (sql/tenants.sql) are in the layer above, which calls this one.

mod access;

pub use access::{announce_change, check_access, purgeable_tenants};
