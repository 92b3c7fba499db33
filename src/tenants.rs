//! Tenants as an access boundary (opt-in: pg_idem.tenant_grants). With the setting off, any role
//! that may call the functions acts on any tenant, which suits one application per database.
//! With it on, a role acts only on the tenants granted to it, or to a role whose privileges it
//! has, in idem.tenant_grants; superusers act on every tenant.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::args::{self, check};
use crate::{errors, guc, sql};

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
    // The role checked is the outer user: the role the session acts as (its login role, or the
    // role of SET ROLE), which neither pg_idem's switch to its owner for SQL nor an
    // application's own SECURITY DEFINER wrapper changes.
    // SAFETY: reads of this backend's session state, valid inside a transaction.
    let role = unsafe { pg_sys::GetOuterUserId() };
    // SAFETY: as above; superuser_arg only reads the role's catalog entry.
    if unsafe { pg_sys::superuser_arg(role) } {
        return;
    }
    // With Citus the grants are a reference table: a grant or revoke made on the coordinator
    // writes every node's copy but invalidates nothing in the other nodes' backends, so no
    // answer is kept there.
    let citus = crate::cluster::citus_installed();
    let look_up =
        || sql::with_client(|c| c.query_one_i64(GRANTED, &[tenant.into(), role.into()])).is_some();
    let granted = if citus {
        look_up()
    } else {
        cached(role, tenant).unwrap_or_else(|| {
            let granted = look_up();
            remember(role, tenant, granted);
            granted
        })
    };
    if !granted {
        errors::tenant_denied(tenant, &role_name(role)).raise();
    }
}

// ---------------------------------------------------------------------------------------------
// A per-backend cache of answers, so that a check costs a hash look-up instead of a statement.
// It is emptied by every invalidation that can change an answer: of idem.tenant_grants (sent by
// idem_grant_tenant / idem_revoke_tenant when their transaction commits, to every backend), of
// role memberships (GRANT/REVOKE role) and of roles themselves (ALTER ROLE ... [NO]INHERIT,
// DROP ROLE). PostgreSQL delivers these at the start of the next transaction or command, which is
// when a change becomes visible to a new statement anyway.
// ---------------------------------------------------------------------------------------------

/// More entries than any real deployment has (role x tenant pairs in use); past it the cache is
/// emptied rather than grown without bound by a caller that cycles through tenant names.
const CACHE_LIMIT: usize = 10_000;

thread_local! {
    static ANSWERS: RefCell<HashMap<(u32, String), bool>> = RefCell::new(HashMap::new());
    static CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
    static GRANTS_RELATION: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

fn cached(role: pg_sys::Oid, tenant: &str) -> Option<bool> {
    // a grant or revoke committed since this statement began counts at once, as it would for
    // the statement itself at READ COMMITTED
    // SAFETY: processes this backend's pending invalidation messages (cheap when there are none).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    ANSWERS.with(|a| a.borrow().get(&(role.to_u32(), tenant.to_owned())).copied())
}

fn remember(role: pg_sys::Oid, tenant: &str, granted: bool) {
    register_callbacks();
    // the callback recognises the table's invalidations by this OID: know it before caching
    grants_relation();
    ANSWERS.with(|a| {
        let mut answers = a.borrow_mut();
        if answers.len() >= CACHE_LIMIT {
            answers.clear();
        }
        answers.insert((role.to_u32(), tenant.to_owned()), granted);
    });
}

fn forget_answers() {
    ANSWERS.with(|a| a.borrow_mut().clear());
}

/// The OID of idem.tenant_grants (it does not change while the extension exists; DROP EXTENSION
/// sends a relcache invalidation for it, which clears this too).
fn grants_relation() -> pg_sys::Oid {
    let known = GRANTS_RELATION.with(Cell::get);
    if known != pg_sys::InvalidOid {
        return known;
    }
    // SAFETY: catalog look-ups by name inside a transaction; a missing schema raises an error,
    // which cannot happen while a pg_idem function runs.
    let relid = unsafe {
        let schema = pg_sys::get_namespace_oid(c"idem".as_ptr(), false);
        pg_sys::get_relname_relid(c"tenant_grants".as_ptr(), schema)
    };
    GRANTS_RELATION.with(|g| g.set(relid));
    relid
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let grants = GRANTS_RELATION.with(Cell::get);
    // InvalidOid: the whole relcache is being reset
    if relid == pg_sys::InvalidOid || relid == grants {
        forget_answers();
        GRANTS_RELATION.with(|g| g.set(pg_sys::InvalidOid));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_role_invalidation(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    forget_answers();
}

fn register_callbacks() {
    if CALLBACKS_REGISTERED.with(Cell::get) {
        return;
    }
    // SAFETY: registered once per backend (the flag above); the callbacks only clear Rust state
    // of this backend and never raise errors or touch the catalogs.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(
            Some(on_relcache_invalidation),
            pg_sys::Datum::from(0),
        );
        for cache in [
            pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM,
            pg_sys::SysCacheIdentifier::AUTHOID,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(on_role_invalidation),
                pg_sys::Datum::from(0),
            );
        }
    }
    CALLBACKS_REGISTERED.with(|r| r.set(true));
}

/// Tells every backend (this one included) that the grants changed, when this transaction
/// commits; nothing is sent if it rolls back.
fn announce_change() {
    // SAFETY: queues a relcache invalidation of an existing relation in this transaction.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(grants_relation()) };
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
