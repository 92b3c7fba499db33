//! What `Layout::load` (and so `Table::open`) refuses: a table or index for which the executor
//! would do something this module does not. Apart so that every refusal, and why, reads in one
//! place.

use pgrx::pg_sys;

use crate::pg::pg_version;

/// Whether the executor would do anything for a write to `rel` that this module does not.
pub(super) fn check_writable(rel: pg_sys::Relation) -> Result<(), &'static str> {
    // SAFETY: rel is an open relation; these are plain reads of its cached catalog data (and
    // syscache probes of its triggers' functions, inside the caller's transaction).
    unsafe {
        let class = &*(*rel).rd_rel;
        if class.relkind != pg_sys::RELKIND_RELATION as i8 {
            return Err("it is not a plain table");
        }
        if class.relam != pg_sys::HEAP_TABLE_AM_OID {
            return Err("it does not use the heap access method");
        }
        if class.relrowsecurity {
            return Err("it has row level security");
        }
        if !(*rel).trigdesc.is_null() && !only_fence_clock_triggers(&*(*rel).trigdesc) {
            return Err("it has triggers");
        }
        if !(*rel).rd_rules.is_null() {
            // INSERT, UPDATE or DELETE rules: only the rewriter runs them
            return Err("it has rules");
        }
        if class.relreplident != pg_sys::REPLICA_IDENTITY_DEFAULT as i8 {
            // the executor refuses UPDATE and DELETE of a published table without an identity
            return Err("its replica identity is not the default (its primary key)");
        }
        if !pg_version::publications_allow_update_and_delete(rel) {
            return Err("a publication filters its rows or columns by more than its primary key");
        }
        let constr = (*(*rel).rd_att).constr;
        if !constr.is_null() && ((*constr).num_check > 0 || (*constr).has_generated_stored) {
            return Err("it has CHECK constraints or generated columns");
        }
    }
    Ok(())
}

/// The C function of pg_idem's own trigger on idem.keys (`lift_fence_clock`, sql/api.sql):
/// it lifts the fence clock to fences written through the executor (a restore's COPY) and
/// changes no row, so a write without the executor needs nothing of it (its fences come from
/// that clock).
const FENCE_CLOCK_TRIGGER: &std::ffi::CStr = c"idem_lift_fence_clock_wrapper";

/// Whether every trigger of `triggers` runs pg_idem's fence clock trigger function: a C
/// function (it has a library) whose symbol is `FENCE_CLOCK_TRIGGER`. Read once per layout.
///
/// SAFETY: `triggers` is the trigger descriptor of an open relation.
unsafe fn only_fence_clock_triggers(triggers: &pg_sys::TriggerDesc) -> bool {
    (0..triggers.numtriggers.max(0) as usize).all(|i| {
        // SAFETY: `triggers` holds `numtriggers` triggers.
        let function = unsafe { (*triggers.triggers.add(i)).tgfoid };
        is_fence_clock_function(function)
    })
}

fn is_fence_clock_function(function: pg_sys::Oid) -> bool {
    // SAFETY: a syscache probe of pg_proc inside a transaction; the tuple is released below
    // and the attributes read are copied out first (text_to_cstring pallocs).
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            pg_sys::Datum::from(function),
        );
        if tuple.is_null() {
            return false;
        }
        let mut no_library = true;
        pg_sys::SysCacheGetAttr(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            tuple,
            pg_sys::Anum_pg_proc_probin as pg_sys::AttrNumber,
            &mut no_library,
        );
        let mut no_symbol = true;
        let symbol = pg_sys::SysCacheGetAttr(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            tuple,
            pg_sys::Anum_pg_proc_prosrc as pg_sys::AttrNumber,
            &mut no_symbol,
        );
        let own = !no_library
            && !no_symbol
            && std::ffi::CStr::from_ptr(pg_sys::text_to_cstring(symbol.cast_mut_ptr()))
                == FENCE_CLOCK_TRIGGER;
        pg_sys::ReleaseSysCache(tuple);
        own
    }
}

/// SAFETY: `index` is an open index and `info` its IndexInfo.
pub(super) unsafe fn check_index(
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
) -> Result<(), &'static str> {
    // SAFETY: the caller's promise.
    unsafe {
        if (*info).ii_Am != pg_sys::BTREE_AM_OID {
            return Err("it has an index that is not a btree index");
        }
        if !(*info).ii_Expressions.is_null()
            || !(*info).ii_Predicate.is_null()
            || !(*info).ii_ExclusionOps.is_null()
        {
            return Err("it has an index with expressions, a predicate or an exclusion constraint");
        }
        if (*info).ii_Unique && !(*(*index).rd_index).indimmediate {
            return Err("it has a deferrable unique index");
        }
    }
    Ok(())
}
