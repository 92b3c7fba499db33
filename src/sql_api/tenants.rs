//! The SQL functions of sql/tenants.sql: idem_grant_tenant, idem_revoke_tenant and the grants'
//! statement trigger. What a grant means, the access check and its cache: `tenants::access`.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors;
use crate::pg::sql;
use crate::sql_api::args::{self, check};
use crate::tenants::announce_change;

const GRANT: &str = "INSERT INTO idem.tenant_grants AS g (role, tenant) \
     VALUES ($1::pg_catalog.regrole, $2) ON CONFLICT (tenant, role) DO NOTHING \
     RETURNING 1::pg_catalog.int8";

const REVOKE: &str = "DELETE FROM idem.tenant_grants AS g \
     WHERE g.tenant OPERATOR(pg_catalog.=) $2 AND g.role::pg_catalog.oid OPERATOR(pg_catalog.=) $1 \
     RETURNING 1::pg_catalog.int8";

/// The statement trigger `tenant_grants_changed` of idem.tenant_grants (sql/tenants.sql): any
/// write to the grants, not only idem_grant_tenant's and idem_revoke_tenant's (a COPY of a
/// restore, an INSERT or DELETE by hand, TRUNCATE, a logical replica's apply: it is ENABLE
/// ALWAYS), announces the change to every backend when its transaction commits. A write that
/// skips triggers (pg_restore --disable-triggers) is announced all the same: the ALTER TABLE
/// ... ENABLE TRIGGER that follows it invalidates the table's relcache entry too. Reads never
/// fire it: the checks cost what they did.
#[pg_trigger(sql = false)]
fn idem_tenant_grants_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    // SAFETY: the relation that fired the trigger is open for the whole statement; queueing
    // its relcache invalidation in this transaction is what a grant through the API does.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid((*trigger.trigger_data().tg_relation).rd_id) };
    Ok(None)
}

/// The role argument: a role of OID 0 (regrole's '-') is no role, refused as a missing one.
fn role_arg(role: Option<pg_sys::Oid>) -> pg_sys::Oid {
    role.filter(|oid| *oid != pg_sys::InvalidOid)
        .unwrap_or_else(|| {
            errors::null_argument("role", "Name the role, such as 'app' (a regrole).").raise()
        })
}

/// Runs GRANT or REVOKE for the checked arguments; true if it changed a row.
fn change_grant(statement: &str, role: Option<pg_sys::Oid>, tenant: Option<&str>) -> bool {
    let role = role_arg(role);
    let tenant = check(args::name(tenant, "tenant"));
    let changed =
        sql::with_client(|c| c.query_one_i64(statement, &[role.into(), tenant.into()])).is_some();
    announce_change();
    changed
}

#[pg_extern(sql = false)]
fn idem_grant_tenant(role: Option<pg_sys::Oid>, tenant: Option<&str>) -> bool {
    change_grant(GRANT, role, tenant)
}

#[pg_extern(sql = false)]
fn idem_revoke_tenant(role: Option<pg_sys::Oid>, tenant: Option<&str>) -> bool {
    change_grant(REVOKE, role, tenant)
}
