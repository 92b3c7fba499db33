//! The access check: whether the role a call acts for may act on a tenant (pg_idem.tenant_grants),
//! with a per-backend cache of its answers, and the tenants a restricted role may purge.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys;

use crate::errors;
use crate::pg::caches::{self, Depends};
use crate::pg::guc;
use crate::pg::heap;
use crate::pg::sql;

const GRANTED: &str = "SELECT 1::pg_catalog.int8 FROM idem.tenant_grants AS g \
     WHERE g.tenant OPERATOR(pg_catalog.=) $1 \
       AND pg_catalog.pg_has_role($2, g.role::pg_catalog.oid, 'USAGE') \
     LIMIT 1";

const GRANTED_TENANTS: &str = "SELECT DISTINCT g.tenant FROM idem.tenant_grants AS g \
     WHERE pg_catalog.pg_has_role($1, g.role::pg_catalog.oid, 'USAGE')";

/// Raises 42501 unless the role checked (`checked_role`) may act on `tenant`.
pub fn check_access(tenant: &str) {
    let Some(role) = restricted_role() else {
        return;
    };
    // With Citus the grants are a reference table: a grant or revoke made on the coordinator
    // writes every node's copy but invalidates nothing in the other nodes' backends, so no
    // answer is kept there, and the look-up is a statement Citus routes.
    let granted = if crate::pg::cluster::citus_installed() {
        sql::with_client(|c| c.query_one_i64(GRANTED, &[tenant.into(), role.into()])).is_some()
    } else {
        // the table must be watched before the stamp is read
        grants_relation();
        cached(role, tenant).unwrap_or_else(|| {
            let before = stamp();
            let granted = granted_now(role, tenant);
            remember(before, role, tenant, granted);
            granted
        })
    };
    if !granted {
        errors::tenant_denied(tenant, &role_name(role)).raise();
    }
}

/// The role whose grants limit what this call may touch: None when pg_idem.tenant_grants is
/// off or the role is a superuser (every tenant).
fn restricted_role() -> Option<pg_sys::Oid> {
    if !guc::tenant_grants() {
        return None;
    }
    let role = checked_role();
    // SAFETY: superuser_arg only reads the role's catalog entry.
    (!unsafe { pg_sys::superuser_arg(role) }).then_some(role)
}

/// The tenants whose expired keys the caller may purge: None for every tenant (tenant grants
/// off, or a superuser), else those granted to the role checked (`checked_role`) or to a role
/// whose privileges it has.
pub fn purgeable_tenants() -> Option<Vec<String>> {
    let role = restricted_role()?;
    Some(sql::with_client(|c| {
        let rows = c.run(GRANTED_TENANTS, &[role.into()]);
        rows.into_iter()
            .filter_map(|row| {
                row.get::<String>(1)
                    .unwrap_or_else(|e| errors::internal("reading granted tenants", e).raise())
            })
            .collect()
    }))
}

/// Whom a tenant check asks about: the role the session acts as (its login role, or the role
/// of SET ROLE), which neither pg_idem's own switch to its owner for SQL nor an application's
/// SECURITY DEFINER wrapper changes; but inside a security-restricted operation the role
/// PostgreSQL acts as. ANALYZE, VACUUM, REINDEX, CLUSTER, CREATE INDEX, REFRESH MATERIALIZED
/// VIEW and autovacuum run a table's index expressions and other code of its owner as that
/// owner, in such an operation, precisely so that maintenance lends the owner's code no rights
/// of whoever started it (a superuser, or autovacuum): the owner's grants decide then.
fn checked_role() -> pg_sys::Oid {
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    // SAFETY: reads of this backend's session state, valid inside a transaction.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        if context & pg_sys::SECURITY_RESTRICTED_OPERATION as i32 != 0 {
            user
        } else {
            pg_sys::GetOuterUserId()
        }
    }
}

/// Whether a grant on `tenant` to `role`, or to a role whose privileges it has, exists in the
/// latest committed state of idem.tenant_grants: read with a fresh snapshot, as PostgreSQL
/// reads its own catalogs, so that a grant or revoke committed before this call counts even
/// inside an older REPEATABLE READ snapshot (from the next statement on, as docs/security.md says).
fn granted_now(role: pg_sys::Oid, tenant: &str) -> bool {
    let (relid, index) = grants_relation();
    let mut granted = false;
    heap::scan_latest_by_text(relid, index, "tenant", tenant, |row| {
        let grantee = row.oid_by_name("role").unwrap_or_else(|| {
            errors::internal("reading idem.tenant_grants", "a grant without a role").raise()
        });
        // SAFETY: has_privs_of_role reads role memberships (cached, with their invalidations).
        granted = unsafe { pg_sys::has_privs_of_role(role, grantee) };
        granted
    });
    granted
}

// ---------------------------------------------------------------------------------------------
// A per-backend cache of answers, so that a check costs a hash look-up instead of a statement.
// It is emptied by every invalidation that can change an answer: of idem.tenant_grants (sent by
// any write to it, through its statement trigger, and by idem_grant_tenant / idem_revoke_tenant,
// when the writing transaction commits, to every backend), of
// role memberships (GRANT/REVOKE role) and of roles themselves (ALTER ROLE ... [NO]INHERIT,
// DROP ROLE). PostgreSQL delivers these at the start of the next transaction or command, which is
// when a change becomes visible to a new statement anyway.
// ---------------------------------------------------------------------------------------------

/// More entries than any real deployment has (role x tenant pairs in use); past it the cache is
/// emptied rather than grown without bound by a caller that cycles through tenant names.
const CACHE_LIMIT: usize = 10_000;

/// What the answers depend on (`caches`): it moves with every grant or revoke committed and
/// every change of a role or a membership.
fn stamp() -> u64 {
    caches::generation(Depends::TenantGrants) + caches::generation(Depends::Roles)
}

/// Whether a role (by OID) may act on a tenant.
type Answers = HashMap<(u32, String), bool>;

thread_local! {
    /// The answers, and the stamp they were looked up at.
    static ANSWERS: RefCell<(u64, Answers)> = RefCell::new((0, HashMap::new()));
    /// idem.tenant_grants and its primary key (InvalidOid until looked up), and the generation
    /// of `Depends::TenantGrants` they were found at.
    static GRANTS_RELATION: Cell<(u64, pg_sys::Oid, pg_sys::Oid)> =
        const { Cell::new((0, pg_sys::InvalidOid, pg_sys::InvalidOid)) };
}

fn cached(role: pg_sys::Oid, tenant: &str) -> Option<bool> {
    // a grant or revoke committed since this statement began counts at once, as it would for
    // the statement itself at READ COMMITTED
    // SAFETY: processes this backend's pending invalidation messages (cheap when there are none).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    let now = stamp();
    ANSWERS.with(|a| {
        let mut answers = a.borrow_mut();
        if answers.0 != now {
            *answers = (now, HashMap::new());
        }
        answers.1.get(&(role.to_u32(), tenant.to_owned())).copied()
    })
}

/// Keeps an answer looked up from `before` on, unless an invalidation arrived meanwhile: it may
/// concern what the look-up read, so the answer is used once, not kept.
fn remember(before: u64, role: pg_sys::Oid, tenant: &str, granted: bool) {
    if stamp() != before {
        return;
    }
    ANSWERS.with(|a| {
        let mut answers = a.borrow_mut();
        if answers.0 != before {
            *answers = (before, HashMap::new());
        }
        if answers.1.len() >= CACHE_LIMIT {
            answers.1.clear();
        }
        answers
            .1
            .insert((role.to_u32(), tenant.to_owned()), granted);
    });
}

/// The OIDs of idem.tenant_grants and of its primary key, found again after any invalidation
/// of either (DROP EXTENSION, REINDEX), and watched from then on.
fn grants_relation() -> (pg_sys::Oid, pg_sys::Oid) {
    let generation = caches::generation(Depends::TenantGrants);
    let (found_at, table, index) = GRANTS_RELATION.with(Cell::get);
    if found_at == generation && table != pg_sys::InvalidOid {
        return (table, index);
    }
    // SAFETY: catalog look-ups by name inside a transaction; a missing schema raises an error,
    // which cannot happen while a pg_idem function runs.
    let (table, index) = unsafe {
        let schema = pg_sys::get_namespace_oid(c"idem".as_ptr(), false);
        (
            pg_sys::get_relname_relid(c"tenant_grants".as_ptr(), schema),
            pg_sys::get_relname_relid(c"tenant_grants_pkey".as_ptr(), schema),
        )
    };
    if table == pg_sys::InvalidOid {
        errors::internal("finding idem.tenant_grants", "the table is missing").raise();
    }
    // without its primary key (a DBA dropped it) the grants are read by a sequential scan
    caches::watch(
        Depends::TenantGrants,
        [table, index]
            .into_iter()
            .filter(|oid| *oid != pg_sys::InvalidOid),
    );
    GRANTS_RELATION.with(|g| g.set((generation, table, index)));
    (table, index)
}

/// Tells every backend (this one included) that the grants changed, when this transaction
/// commits; nothing is sent if it rolls back.
pub fn announce_change() {
    // SAFETY: queues a relcache invalidation of an existing relation in this transaction.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(grants_relation().0) };
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
