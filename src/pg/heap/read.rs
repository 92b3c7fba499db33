//! The reading half of `Table`: look-ups through the primary key (`find`) or where this
//! transaction last wrote a row (`fetch_own`), and who holds the row version found. Apart from
//! the writing half, which only takes what a look-up found.

use pgrx::pg_sys;

use super::scan::text_equals;
use super::{PrimaryKey, Table, Written};
use crate::pg::pg_version;

/// Which row versions a look-up returns.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Snap {
    /// The transaction's snapshot (a new one for each call at READ COMMITTED).
    Transaction,
    /// The latest version, committed or not: another transaction's uncommitted insert, or the
    /// version another transaction is updating, deleting or has locked (PostgreSQL's
    /// SnapshotDirty, which unique checks use).
    Latest,
}

/// Who, other than committed history, is acting on a row version found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Nobody,
    /// This transaction inserted it, or updated or locked it (any live subtransaction).
    Me,
    /// Another transaction, still running, is inserting it (found with `Snap::Latest` only).
    Inserting(pg_sys::TransactionId),
    /// Another transaction, still running, updates, deletes or has locked it (`Snap::Latest`).
    Changing(pg_sys::TransactionId),
}

/// A row version found by a look-up: its values (pointing into a copy of the tuple in the
/// current memory context), where it is, and who holds it.
pub struct Found {
    pub tid: pg_sys::ItemPointerData,
    pub values: Vec<pg_sys::Datum>,
    pub nulls: Vec<bool>,
    pub holder: Holder,
}

impl Found {
    /// Whether two look-ups found the same row version.
    pub fn same_version(a: Option<&Found>, b: Option<&Found>) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                let (a, b) = (a.tid, b.tid);
                a.ip_posid == b.ip_posid
                    && a.ip_blkid.bi_hi == b.ip_blkid.bi_hi
                    && a.ip_blkid.bi_lo == b.ip_blkid.bi_lo
            }
            _ => false,
        }
    }

    pub fn datum(&self, attno: usize) -> Option<pg_sys::Datum> {
        (!self.nulls[attno - 1]).then(|| self.values[attno - 1])
    }
}

impl Table {
    /// Looks up the row whose text columns equal `values` (in the order of the primary key's
    /// columns), through the primary key `key`, with an index scan on the index already open.
    pub fn find(&self, key: PrimaryKey, values: &[&str], snap: Snap) -> Option<Found> {
        let index_rel = self.index(key.0);
        let mut keys: Vec<pg_sys::ScanKeyData> = values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                // the attribute is the index's column i+1, the collation that column's own, so
                // the btree compares as it sorted
                // SAFETY: index_rel is open; it has a collation per key column.
                let collation = unsafe { *(*index_rel).rd_indcollation.add(i) };
                text_equals((i + 1) as pg_sys::AttrNumber, collation, value)
            })
            .collect();
        // SAFETY: a dirty snapshot is a SnapshotData with only its type set (InitDirtySnapshot);
        // the scan fills in xmin/xmax for each tuple it returns.
        let mut dirty: pg_sys::SnapshotData = unsafe { std::mem::zeroed() };
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let registered = match snap {
            // SAFETY: GetTransactionSnapshot returns a valid snapshot; registering copies it, so
            // later calls cannot change it under the scan; unregistered below.
            Snap::Transaction => unsafe {
                pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot())
            },
            Snap::Latest => &raw mut dirty,
        };
        // SAFETY: the table and its primary key are open, the keys are initialized and outlive
        // the scan; the tuple the slot holds stays valid (pinned) until the slot is dropped, and
        // is copied before.
        unsafe {
            let scan =
                pg_version::index_beginscan(self.rel, index_rel, registered, keys.len() as i32);
            pg_sys::index_rescan(
                scan,
                keys.as_mut_ptr(),
                keys.len() as i32,
                std::ptr::null_mut(),
                0,
            );
            let slot = pg_sys::MakeSingleTupleTableSlot(
                (*self.rel).rd_att,
                &raw const pg_sys::TTSOpsBufferHeapTuple,
            );
            let found =
                pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot)
                    .then(|| {
                        let mut should_free = false;
                        let tuple = pg_sys::ExecFetchSlotHeapTuple(slot, false, &mut should_free);
                        let holder = if dirty.xmin != pg_sys::InvalidTransactionId {
                            Holder::Inserting(dirty.xmin)
                        } else if dirty.xmax != pg_sys::InvalidTransactionId {
                            Holder::Changing(dirty.xmax)
                        } else if held_by_me((*tuple).t_data) {
                            Holder::Me
                        } else {
                            Holder::Nobody
                        };
                        self.deform(pg_sys::heap_copytuple(tuple), holder)
                    });
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            pg_sys::index_endscan(scan);
            if snap == Snap::Transaction {
                pg_sys::UnregisterSnapshot(registered);
            }
            found
        }
    }

    /// The row version `written` says this table wrote, if it is still this transaction's
    /// latest version of that row (inserted or updated by it, in a subtransaction still alive);
    /// None otherwise: another transaction's write, an older version, a version of a rolled back
    /// subtransaction, a rewritten table. For a caller that remembers where it wrote a row, a
    /// look-up without an index descent.
    pub fn fetch_own(&self, written: &Written) -> Option<Found> {
        // SAFETY: plain reads of this backend's transaction state and of the open relation.
        let (same_transaction, same_file) = unsafe {
            (
                written.xid == pg_sys::GetTopTransactionIdIfAny(),
                written.relfilenode == (*(*self.rel).rd_rel).relfilenode,
            )
        };
        if !same_transaction || !same_file {
            return None;
        }
        let tid = written.tid;
        let block = (u32::from(tid.ip_blkid.bi_hi) << 16) | u32::from(tid.ip_blkid.bi_lo);
        // The block was written in this transaction, and this transaction's lock on the table
        // keeps others from truncating it; only a TRUNCATE of storage this very transaction
        // created empties the file in place, so only then is the block's existence checked.
        // SAFETY: the table is open.
        if unsafe { pg_version::storage_is_new_in_this_transaction(self.rel) } {
            // SAFETY: the table is open; the number of blocks of its main fork comes from smgr.
            let blocks = unsafe {
                pg_sys::RelationGetNumberOfBlocksInFork(self.rel, pg_sys::ForkNumber::MAIN_FORKNUM)
            };
            if block >= blocks {
                return None;
            }
        }
        // SAFETY: the block exists (above). An index scan prunes each heap page it visits
        // (dead versions of HOT chains, such as the one a completion leaves behind); so does
        // this look-up, with the page pinned by it alone and before any tuple on it is read,
        // since pruning may move tuples within the page.
        unsafe {
            let buffer = pg_sys::ReadBuffer(self.rel, block);
            pg_sys::heap_page_prune_opt(self.rel, buffer);
            pg_sys::ReleaseBuffer(buffer);
        }
        // SAFETY: a SnapshotSelf is a SnapshotData with only its type set; it sees what this
        // transaction wrote up to now, and no version it replaced or deleted.
        let mut snapshot: pg_sys::SnapshotData = unsafe { std::mem::zeroed() };
        snapshot.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_SELF;
        // SAFETY: heap_fetch fills in the rest of the tuple data from t_self.
        let mut tuple: pg_sys::HeapTupleData = unsafe { std::mem::zeroed() };
        tuple.t_self = tid;
        let mut buffer: pg_sys::Buffer = 0;
        // SAFETY: the table is open, the block exists, the snapshot is valid for the call; on
        // success the buffer is pinned and released below, after the copy.
        unsafe {
            if !pg_version::heap_fetch(self.rel, &raw mut snapshot, &mut tuple, &mut buffer) {
                return None;
            }
            let mine =
                pg_sys::TransactionIdIsCurrentTransactionId((*tuple.t_data).t_choice.t_heap.t_xmin);
            let found = mine.then(|| self.deform(pg_sys::heap_copytuple(&mut tuple), Holder::Me));
            pg_sys::ReleaseBuffer(buffer);
            found
        }
    }

    /// SAFETY: `tuple` is a valid heap tuple of this table in memory that outlives the result.
    unsafe fn deform(&self, tuple: pg_sys::HeapTuple, holder: Holder) -> Found {
        let natts = self.natts();
        let mut values = vec![pg_sys::Datum::from(0); natts];
        let mut nulls = vec![true; natts];
        // SAFETY: the arrays have one entry per attribute of the descriptor the tuple was
        // formed with (the caller's promise).
        unsafe {
            pg_sys::heap_deform_tuple(
                tuple,
                (*self.rel).rd_att,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            Found {
                tid: (*tuple).t_self,
                values,
                nulls,
                holder,
            }
        }
    }
}

/// Whether this transaction (a live subtransaction of it) inserted the tuple, or updated or
/// locked it.
///
/// SAFETY: `header` is the header of a valid tuple.
unsafe fn held_by_me(header: pg_sys::HeapTupleHeader) -> bool {
    // SAFETY: the caller's promise; the fields read exist in every supported version.
    unsafe {
        if pg_sys::TransactionIdIsCurrentTransactionId((*header).t_choice.t_heap.t_xmin) {
            return true;
        }
        let infomask = (*header).t_infomask as u32;
        if infomask & pg_sys::HEAP_XMAX_INVALID != 0 {
            return false;
        }
        let xmax = (*header).t_choice.t_heap.t_xmax;
        if infomask & pg_sys::HEAP_XMAX_IS_MULTI == 0 {
            return pg_sys::TransactionIdIsCurrentTransactionId(xmax);
        }
        let lock_only = infomask & pg_sys::HEAP_XMAX_LOCK_ONLY != 0
            || infomask & (pg_sys::HEAP_XMAX_IS_MULTI | pg_sys::HEAP_LOCK_MASK)
                == pg_sys::HEAP_XMAX_EXCL_LOCK;
        let mut members: *mut pg_sys::MultiXactMember = std::ptr::null_mut();
        let count = pg_sys::GetMultiXactIdMembers(xmax, &mut members, false, lock_only);
        let mine = (0..count.max(0) as usize)
            .any(|i| pg_sys::TransactionIdIsCurrentTransactionId((*members.add(i)).xid));
        if !members.is_null() {
            pg_sys::pfree(members.cast());
        }
        mine
    }
}
