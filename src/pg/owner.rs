//! Acting as the extension's owner, only where PostgreSQL checks privileges or resolves names.
//!
//! pg_idem's request-path functions run with the caller's rights: `SECURITY DEFINER SET
//! search_path` made fmgr save and restore the user and a GUC nest level on every call, which
//! was a large share of a claim's cost, and the engine path does not need it (the table and
//! index access methods check no privileges and resolve no names). What does need it runs
//! here, as `SECURITY DEFINER SET search_path = pg_catalog, pg_temp` would have run it: SQL
//! statements on the SPI path (Citus, a hot standby, an idem.keys the engine cannot write),
//! the tenant-grant statements (on Citus; elsewhere the grants are read by an index scan of
//! pg_idem's own table, which checks no privileges and resolves no names), and the fence
//! sequence.
//!
//! No policy: callers decide what runs as the owner.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::errors;

/// The role that owns the pg_idem extension, from pg_extension (read at each call: it is rare,
/// and REASSIGN OWNED may change it without an invalidation this backend could hear of).
fn extension_owner() -> pg_sys::Oid {
    // SAFETY: a scan of pg_extension by its name index inside a transaction, as
    // get_extension_oid() does; the tuple is read before the scan ends.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(pg_sys::ExtensionRelationId, lock);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_extname as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::RegProcedure::from(pg_sys::F_NAMEEQ),
            pg_sys::Datum::from(c"pg_idem".as_ptr()),
        );
        let scan = pg_sys::systable_beginscan(
            rel,
            pg_sys::Oid::from(pg_sys::ExtensionNameIndexId),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let owner = (!tuple.is_null()).then(|| {
            let header = (*tuple).t_data;
            let form = (header as *const u8).add((*header).t_hoff as usize)
                as *const pg_sys::FormData_pg_extension;
            (*form).extowner
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, lock);
        owner.unwrap_or_else(|| {
            errors::internal("finding the owner of pg_idem", "pg_idem is not installed").raise()
        })
    }
}

const SEARCH_PATH: &CStr = c"pg_catalog, pg_temp";

/// Runs `f` as the extension's owner, with search_path pinned to `pg_catalog, pg_temp`, as a
/// `SECURITY DEFINER SET search_path` function runs its body.
///
/// If `f` raises an error, nothing here is undone by hand: the (sub)transaction's abort puts
/// the user back and unwinds the GUC nest level, as it does for fmgr's SECURITY DEFINER call.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    let owner = extension_owner();
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    // SAFETY: reads and sets this backend's current user and security context, as
    // fmgr_security_definer does; SECURITY_LOCAL_USERID_CHANGE keeps SET ROLE and SET SESSION
    // AUTHORIZATION from being used inside (they would be undone at the end anyway).
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            pgrx::PgLogLevel::ERROR as i32,
            false,
        );
        nest
    };
    let result = f();
    // SAFETY: undoes exactly what was set above, in reverse order, on the way out without an
    // error (an error is undone by the abort, see above).
    unsafe {
        pg_sys::AtEOXact_GUC(true, nest);
        pg_sys::SetUserIdAndSecContext(user, context);
    }
    result
}
