//! Tenants as an access boundary (opt-in: pg_idem.tenant_grants). With the setting off, any role
//! that may call the functions acts on any tenant, which suits one application per database.
//! With it on, a role acts only on the tenants granted to it, or to a role whose privileges it
//! has, in idem.tenant_grants; superusers act on every tenant.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::args::{self, check};
use crate::{errors, guc, store};

const GRANTED: &str = "SELECT 1::pg_catalog.int8 FROM idem.tenant_grants AS g \
     WHERE g.tenant OPERATOR(pg_catalog.=) $1 \
       AND pg_catalog.pg_has_role($2, g.role::pg_catalog.oid, 'USAGE') \
     LIMIT 1";

const GRANT: &str = "INSERT INTO idem.tenant_grants AS g (role, tenant) \
     VALUES ($1::pg_catalog.regrole, $2) ON CONFLICT (tenant, role) DO NOTHING \
     RETURNING 1::pg_catalog.int8";

const REVOKE: &str = "DELETE FROM idem.tenant_grants AS g \
     WHERE g.tenant OPERATOR(pg_catalog.=) $2 AND g.role::pg_catalog.oid OPERATOR(pg_catalog.=) $1 \
     RETURNING 1::pg_catalog.int8";

/// Raises 42501 unless the session's role may act on `tenant`.
pub fn check_access(tenant: &str) {
    if !guc::tenant_grants() {
        return;
    }
    // The functions run as the extension owner (SECURITY DEFINER), so current_user is the owner
    // here; the outer user is the role the session acts as (its login role, or the role of SET
    // ROLE).
    // SAFETY: reads of this backend's session state, valid inside a transaction.
    let role = unsafe { pg_sys::GetOuterUserId() };
    // SAFETY: as above; superuser_arg only reads the role's catalog entry.
    if unsafe { pg_sys::superuser_arg(role) } {
        return;
    }
    let granted =
        store::with_client(|c| c.query_one_i64(GRANTED, &[tenant.into(), role.into()])).is_some();
    if !granted {
        errors::tenant_denied(tenant, &role_name(role)).raise();
    }
}

fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: with noerr = true a missing role gives NULL instead of an error; otherwise the
    // name is a palloc'd NUL-terminated string.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        if name.is_null() {
            format!("{}", role.to_u32())
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

fn role_arg(role: Option<pg_sys::Oid>) -> pg_sys::Oid {
    role.unwrap_or_else(|| {
        errors::null_argument("role", "Name the role, such as 'app' (a regrole).").raise()
    })
}

#[pg_extern(sql = false)]
fn idem_grant_tenant(role: Option<pg_sys::Oid>, tenant: Option<&str>) -> bool {
    let role = role_arg(role);
    let tenant = check(args::name(tenant, "tenant"));
    store::with_client(|c| c.query_one_i64(GRANT, &[role.into(), tenant.into()])).is_some()
}

#[pg_extern(sql = false)]
fn idem_revoke_tenant(role: Option<pg_sys::Oid>, tenant: Option<&str>) -> bool {
    let role = role_arg(role);
    let tenant = check(args::name(tenant, "tenant"));
    store::with_client(|c| c.query_one_i64(REVOKE, &[role.into(), tenant.into()])).is_some()
}
