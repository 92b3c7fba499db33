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

/// index_beginscan. PostgreSQL 18 added an instrumentation argument (for EXPLAIN ANALYZE of
/// index scans), which a scan outside the executor leaves NULL.
///
/// SAFETY: as for PostgreSQL's index_beginscan: `heap` and `index` open and locked, `snapshot`
/// valid for the whole scan.
pub unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
) -> pg_sys::IndexScanDesc {
    #[cfg(not(feature = "pg18"))]
    // SAFETY: the caller's promise.
    unsafe {
        pg_sys::index_beginscan(heap, index, snapshot, nkeys, 0)
    }
    #[cfg(feature = "pg18")]
    // SAFETY: the caller's promise; no instrumentation.
    unsafe {
        pg_sys::index_beginscan(heap, index, snapshot, std::ptr::null_mut(), nkeys, 0)
    }
}

/// heap_fetch: the tuple at `tuple.t_self` if `snapshot` sees it; on success its buffer is
/// pinned in `buffer` (the caller releases it), on failure no buffer is kept. PostgreSQL 15
/// added `keep_buf` to keep the buffer of a tuple the snapshot does not see; it is false here,
/// which is what 14 always does.
///
/// SAFETY: as for PostgreSQL's heap_fetch: `rel` open and locked, `tuple.t_self` a tid within
/// the relation, `snapshot` valid.
pub unsafe fn heap_fetch(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    tuple: &mut pg_sys::HeapTupleData,
    buffer: &mut pg_sys::Buffer,
) -> bool {
    #[cfg(feature = "pg14")]
    // SAFETY: the caller's promise.
    unsafe {
        pg_sys::heap_fetch(rel, snapshot, tuple, buffer)
    }
    #[cfg(not(feature = "pg14"))]
    // SAFETY: the caller's promise.
    unsafe {
        pg_sys::heap_fetch(rel, snapshot, tuple, buffer, false)
    }
}

/// Whether the relation's storage was created in this transaction (the relation itself, or a
/// new relfilenode: TRUNCATE, a rewrite): only then can TRUNCATE empty that very file in place.
/// PostgreSQL 16 renamed the field (relfilenode to relfilelocator).
///
/// SAFETY: `rel` is an open relation.
pub unsafe fn storage_is_new_in_this_transaction(rel: pg_sys::Relation) -> bool {
    // SAFETY: the caller's promise; plain reads of the relcache entry.
    unsafe {
        #[cfg(any(feature = "pg14", feature = "pg15"))]
        let new_storage = (*rel).rd_newRelfilenodeSubid;
        #[cfg(not(any(feature = "pg14", feature = "pg15")))]
        let new_storage = (*rel).rd_newRelfilelocatorSubid;
        // InvalidSubTransactionId is 0 (not in the bindings: a macro)
        (*rel).rd_createSubid != 0 || new_storage != 0
    }
}

/// Whether the executor's check of a published table's replica identity
/// (CheckCmdReplicaIdentity) lets UPDATE and DELETE through, for a table whose replica
/// identity is its primary key. PostgreSQL 14 has no row filters or column lists, so the
/// primary key always passes; 15 and later check that the publications' row filters and
/// column lists (18: published generated columns) cover the identity.
///
/// SAFETY: `rel` is an open table.
pub unsafe fn publications_allow_update_and_delete(rel: pg_sys::Relation) -> bool {
    #[cfg(feature = "pg14")]
    {
        let _ = rel;
        true
    }
    #[cfg(not(feature = "pg14"))]
    // SAFETY: the caller's promise; RelationBuildPublicationDesc fills in the struct (from the
    // relcache's copy when it has one).
    unsafe {
        let mut desc: pg_sys::PublicationDesc = std::mem::zeroed();
        pg_sys::RelationBuildPublicationDesc(rel, &mut desc);
        let valid = desc.rf_valid_for_update
            && desc.rf_valid_for_delete
            && desc.cols_valid_for_update
            && desc.cols_valid_for_delete;
        #[cfg(feature = "pg18")]
        let valid = valid && desc.gencols_valid_for_update && desc.gencols_valid_for_delete;
        valid
    }
}

/// Sends this process's pending table statistics (rows inserted, updated, deleted) to the
/// cumulative statistics, as a backend does when it goes idle: a background worker that never
/// does keeps its counts until it exits, so autovacuum and pg_stat_user_tables would not see
/// them. `force`: even if the last report was moments ago (otherwise at most about once a
/// second). Called outside a transaction.
pub fn report_table_statistics(force: bool) {
    // SAFETY: called between transactions in a process connected to a database; the function
    // only flushes this process's own pending counts.
    unsafe {
        #[cfg(feature = "pg14")]
        pg_sys::pgstat_report_stat(force);
        #[cfg(not(feature = "pg14"))]
        let _ = pg_sys::pgstat_report_stat(force);
    }
}
