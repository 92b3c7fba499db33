//! The access-method calls whose signatures differ between the supported PostgreSQL versions
//! (14 to 18), behind one signature each.

use pgrx::pg_sys;

/// heap_update. Whether the new version is heap-only (HOT), and so needs no index entries, is
/// read from its header afterwards in every version; PostgreSQL 16 and later also report it
/// through an out parameter, which only adds "summarizing" (BRIN) indexes to that, and those
/// are refused by `heap::Table::open`.
///
/// SAFETY: as for PostgreSQL's heap_update: `rel` open with RowExclusiveLock, `tid` a version of
/// one of its rows, `tuple` formed with its descriptor.
pub unsafe fn heap_update(
    rel: pg_sys::Relation,
    tid: &mut pg_sys::ItemPointerData,
    tuple: pg_sys::HeapTuple,
    cid: pg_sys::CommandId,
    wait: bool,
    failure: &mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    let mut lock_mode: pg_sys::LockTupleMode::Type = 0;
    #[cfg(any(feature = "pg14", feature = "pg15"))]
    // SAFETY: the caller's promise; the out parameters are valid for writes.
    unsafe {
        pg_sys::heap_update(
            rel,
            tid,
            tuple,
            cid,
            std::ptr::null_mut(),
            wait,
            failure,
            &mut lock_mode,
        )
    }
    #[cfg(not(any(feature = "pg14", feature = "pg15")))]
    // SAFETY: the caller's promise; the out parameters are valid for writes.
    unsafe {
        let mut update_indexes: pg_sys::TU_UpdateIndexes::Type = 0;
        pg_sys::heap_update(
            rel,
            tid,
            tuple,
            cid,
            std::ptr::null_mut(),
            wait,
            failure,
            &mut lock_mode,
            &mut update_indexes,
        )
    }
}
