//! The writing half of `Table`: inserts (speculative, against the primary key), updates,
//! deletes and row locks, with their index entries, as the executor writes them. Apart from the
//! look-ups, and from the tenant cache's scan, which never writes.

use pgrx::pg_sys;

use super::{Found, PrimaryKey, Table, Written};
use crate::errors;
use crate::pg::pg_version;

/// What an insert gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    Yes,
    /// Another row holds the primary key (committed, or its transaction is running); this
    /// transaction's row was taken back.
    Taken,
}

/// What a write to an existing row version gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Done,
    /// Another running transaction holds the row (only when not waiting).
    Busy(pg_sys::TransactionId),
    /// A committed transaction updated or deleted the row since it was read: read it again
    /// (or, with a transaction snapshot, fail with a serialization failure).
    Changed,
}

impl Table {
    /// Notes that the tuple `tuple` was just written by this transaction.
    ///
    /// SAFETY: `tuple` was just inserted or is the new version of an update (its t_self set).
    unsafe fn note_written(&self, tuple: pg_sys::HeapTuple) {
        // SAFETY: the caller's promise; the write assigned this transaction an id.
        self.written.set(Some(unsafe {
            Written {
                tid: (*tuple).t_self,
                xid: pg_sys::GetTopTransactionIdIfAny(),
                relfilenode: (*(*self.rel).rd_rel).relfilenode,
            }
        }));
    }

    fn form(&self, values: &mut [pg_sys::Datum], nulls: &mut [bool]) -> pg_sys::HeapTuple {
        if values.len() != self.natts() || nulls.len() != self.natts() {
            errors::internal("writing a row", "wrong number of columns").raise();
        }
        for (i, attribute) in self.descriptor().iter().enumerate() {
            if attribute.attnotnull && nulls[i] {
                errors::internal(
                    "writing a row",
                    format!("NULL in NOT NULL column {}", attribute.name()),
                )
                .raise();
            }
        }
        // Trailing NULLs are left off the row, as PostgreSQL leaves off the columns added after
        // a row was written (every reader takes a column past a row's end for NULL, or for the
        // column's missing value, which `least_natts` keeps in): a row of 8 columns or fewer
        // needs no null bitmap beyond the header's spare byte, so its data starts 8 bytes
        // earlier (sql/schema.sql puts a message row's columns first for this).
        let natts = nulls
            .iter()
            .rposition(|&null| !null)
            .map_or(0, |last| last + 1)
            .max(self.layout.least_natts);
        // SAFETY: one value and one null flag per attribute, as checked above, of which the
        // first `natts` are formed (the descriptor's); the datums are of the columns' types
        // (the caller's promise), copied into the new tuple. The table is open and its layout
        // current (`open`).
        unsafe {
            let full = (*self.rel).rd_att;
            let descriptor = if natts == self.natts() {
                full
            } else {
                self.layout.prefix(full, natts)
            };
            pg_sys::heap_form_tuple(descriptor, values.as_mut_ptr(), nulls.as_mut_ptr())
        }
    }

    /// Inserts a row and its index entries, unless another row (committed, or inserted by a
    /// transaction still running) already holds its value of the primary key `key`: then the
    /// row is taken back at once and the answer is `Inserted::Taken`, without waiting for that
    /// transaction. This is INSERT ... ON CONFLICT DO NOTHING without the wait, and written the
    /// way the executor writes it: a speculative insertion. The unique check of `key` is
    /// btree's partial one (the one deferred constraints use), which reports a possible
    /// duplicate instead of waiting and raising; a row that lost is killed with
    /// heap_abort_speculative, which makes it invisible to every snapshot at once (a plain
    /// delete would leave it "being inserted" for other sessions' dirty snapshots and unique
    /// checks until this transaction ends, so that they would take the key for held by it); a
    /// row that won is confirmed with heap_finish_speculative. Its index entries stay behind for
    /// VACUUM either way. Other unique indexes check as the executor does (23505).
    pub fn insert(
        &self,
        key: PrimaryKey,
        values: &mut [pg_sys::Datum],
        nulls: &mut [bool],
    ) -> Inserted {
        let tuple = self.form(values, nulls);
        // SAFETY: assigns this transaction's id (a write needs one anyway), then takes the
        // speculative-insertion lock of this backend, released below once the row is confirmed
        // or killed (an error in between releases it with the transaction's other locks).
        let (xid, token) = unsafe {
            let xid = pg_sys::GetCurrentTransactionId();
            (xid, pg_sys::SpeculativeInsertionLockAcquire(xid))
        };
        // SAFETY: `tuple` was just formed and is ours; the speculative token is kept in its
        // t_ctid (block number = token, offset = SpecTokenOffsetNumber), as
        // HeapTupleHeaderSetSpeculativeToken does, until heap_finish_speculative replaces it.
        // The table is open with RowExclusiveLock and the tuple matches its descriptor;
        // heap_insert assigns the transaction id, writes WAL and TOASTs as needed.
        unsafe {
            let ctid = &mut (*(*tuple).t_data).t_ctid;
            ctid.ip_blkid.bi_hi = (token >> 16) as u16;
            ctid.ip_blkid.bi_lo = (token & 0xffff) as u16;
            ctid.ip_posid = pg_sys::SpecTokenOffsetNumber as u16;
            pg_sys::heap_insert(
                self.rel,
                tuple,
                pg_sys::GetCurrentCommandId(true),
                pg_sys::HEAP_INSERT_SPECULATIVE as i32,
                std::ptr::null_mut(),
            );
        }
        let unique = self.insert_index_entries(tuple, None, Some(key));
        // SAFETY: heap_insert set the tuple's t_self to where the row went; this transaction
        // inserted it speculatively just above, so it may confirm or kill it.
        unsafe {
            let mut tid = (*tuple).t_self;
            if unique {
                pg_sys::heap_finish_speculative(self.rel, &mut tid);
            } else {
                pg_sys::heap_abort_speculative(self.rel, &mut tid);
            }
            pg_sys::SpeculativeInsertionLockRelease(xid);
            // makes the row (or its absence) visible to the next look-up of this transaction
            pg_sys::CommandCounterIncrement();
        }
        if unique {
            // SAFETY: heap_insert set the tuple's t_self to where it went.
            unsafe { self.note_written(tuple) };
            Inserted::Yes
        } else {
            Inserted::Taken
        }
    }

    /// Replaces the row version at `found` with `values`; without `wait`, a row another running
    /// transaction holds is left alone (`Write::Busy`).
    pub fn update(
        &self,
        found: &Found,
        values: &mut [pg_sys::Datum],
        nulls: &mut [bool],
        wait: bool,
    ) -> Write {
        let tuple = self.form(values, nulls);
        let mut tid = found.tid;
        // SAFETY: the failure data is written by heap_update before it is read
        let mut failure: pg_sys::TM_FailureData = unsafe { std::mem::zeroed() };
        // SAFETY: the table is open with RowExclusiveLock, tid comes from a look-up of it in
        // this command, and the tuple matches its descriptor.
        let result = unsafe {
            pg_version::heap_update(
                self.rel,
                &mut tid,
                tuple,
                pg_sys::GetCurrentCommandId(true),
                wait,
                &mut failure,
            )
        };
        let write = self.write_result(result, &failure);
        if write == Write::Done {
            // SAFETY: heap_update set the new version's header, heap-only or not (the
            // HEAP_ONLY_TUPLE bit of t_infomask2, read directly: PostgreSQL 18's bindings and
            // pgrx both define the macro's function).
            let heap_only =
                unsafe { u32::from((*(*tuple).t_data).t_infomask2) & pg_sys::HEAP_ONLY_TUPLE != 0 };
            if !heap_only {
                self.insert_index_entries(tuple, Some((found, values, nulls)), None);
            }
            // SAFETY: heap_update set the new version's t_self to where it went.
            unsafe { self.note_written(tuple) };
            // SAFETY: makes the new version visible to the next look-up of this transaction.
            unsafe { pg_sys::CommandCounterIncrement() };
        }
        write
    }

    /// Deletes the row version at `found` (its index entries go with VACUUM, as always).
    pub fn delete(&self, found: &Found, wait: bool) -> Write {
        let mut tid = found.tid;
        // SAFETY: the failure data is written by heap_delete before it is read
        let mut failure: pg_sys::TM_FailureData = unsafe { std::mem::zeroed() };
        // SAFETY: the table is open with RowExclusiveLock; tid comes from a look-up of it.
        let result = unsafe {
            pg_sys::heap_delete(
                self.rel,
                &mut tid,
                pg_sys::GetCurrentCommandId(true),
                std::ptr::null_mut(),
                wait,
                &mut failure,
                false,
            )
        };
        let write = self.write_result(result, &failure);
        if write == Write::Done {
            // SAFETY: makes the deletion visible to the next look-up of this transaction.
            unsafe { pg_sys::CommandCounterIncrement() };
        }
        write
    }

    /// Locks the row version at `found` until the end of the transaction, as
    /// SELECT ... FOR NO KEY UPDATE does, waiting for a transaction that holds it.
    pub fn lock(&self, found: &Found) -> Write {
        // SAFETY: zeroed structs are filled in by heap_lock_tuple before they are read, apart
        // from the tuple's t_self and t_tableOid, set here.
        let (mut tuple, mut failure): (pg_sys::HeapTupleData, pg_sys::TM_FailureData) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        tuple.t_self = found.tid;
        tuple.t_tableOid = self.relid();
        let mut buffer: pg_sys::Buffer = 0;
        // SAFETY: the table is open; heap_lock_tuple pins the buffer it returns, released below.
        let result = unsafe {
            let result = pg_sys::heap_lock_tuple(
                self.rel,
                &mut tuple,
                pg_sys::GetCurrentCommandId(true),
                pg_sys::LockTupleMode::LockTupleNoKeyExclusive,
                pg_sys::LockWaitPolicy::LockWaitBlock,
                false,
                &mut buffer,
                &mut failure,
            );
            if buffer != 0 {
                pg_sys::ReleaseBuffer(buffer);
            }
            result
        };
        self.write_result(result, &failure)
    }

    fn write_result(
        &self,
        result: pg_sys::TM_Result::Type,
        failure: &pg_sys::TM_FailureData,
    ) -> Write {
        match result {
            pg_sys::TM_Result::TM_Ok => Write::Done,
            pg_sys::TM_Result::TM_BeingModified | pg_sys::TM_Result::TM_WouldBlock => {
                Write::Busy(failure.xmax)
            }
            pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => Write::Changed,
            // a version this very command wrote, or one no snapshot of it could have found
            other => errors::internal(
                "writing a row",
                format!("unexpected result {other} of a heap write"),
            )
            .raise(),
        }
    }

    /// Adds the index entries of a new row version (`old`: the version it replaces, for the
    /// "unchanged" hint that lets btree delete old versions bottom-up). With `partial`, the
    /// unique check of that index only reports a possible duplicate (false) instead of waiting
    /// for its transaction and raising 23505.
    fn insert_index_entries(
        &self,
        tuple: pg_sys::HeapTuple,
        old: Option<(&Found, &[pg_sys::Datum], &[bool])>,
        partial: Option<PrimaryKey>,
    ) -> bool {
        let mut unique = true;
        // SAFETY: a standalone slot for the table's descriptor holding the new tuple (not owned
        // by the slot), dropped at the end; FormIndexDatum needs no executor state for indexes
        // on plain columns, which `open` guarantees.
        unsafe {
            let slot = pg_sys::MakeSingleTupleTableSlot(
                (*self.rel).rd_att,
                &raw const pg_sys::TTSOpsHeapTuple,
            );
            pg_sys::ExecStoreHeapTuple(tuple, slot, false);
            for (position, &(_, info)) in self.layout.indexes.iter().enumerate() {
                if !(*info).ii_ReadyForInserts {
                    continue;
                }
                let index = self.index(position);
                let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
                let mut isnull = [false; pg_sys::INDEX_MAX_KEYS as usize];
                pg_sys::FormIndexDatum(
                    info,
                    slot,
                    std::ptr::null_mut(),
                    values.as_mut_ptr(),
                    isnull.as_mut_ptr(),
                );
                let unchanged = old.is_some_and(|(old, values, nulls)| {
                    Self::index_unchanged(info, old, (values, nulls))
                });
                let check = if !(*info).ii_Unique {
                    pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
                } else if partial.is_some_and(|key| key.0 == position) {
                    pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL
                } else {
                    pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES
                };
                // for UNIQUE_CHECK_PARTIAL, false means "possibly a duplicate" (the other
                // checks raise instead; what they return means nothing)
                let inserted = pg_sys::index_insert(
                    index,
                    values.as_mut_ptr(),
                    isnull.as_mut_ptr(),
                    &mut (*tuple).t_self,
                    self.rel,
                    check,
                    unchanged,
                    info,
                );
                if check == pg_sys::IndexUniqueCheck::UNIQUE_CHECK_PARTIAL && !inserted {
                    unique = false;
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        unique
    }

    /// Whether an update left every column of the index as it was: `new` are the values the
    /// new version was formed from. By-reference values count as unchanged only when they are
    /// the same datum (callers pass the old datum on for a column they do not change): the hint
    /// may say "changed" wrongly, never "unchanged".
    ///
    /// SAFETY: `info` is an index of this table.
    unsafe fn index_unchanged(
        info: *mut pg_sys::IndexInfo,
        old: &Found,
        new: (&[pg_sys::Datum], &[bool]),
    ) -> bool {
        // SAFETY: the caller's promise.
        let attnos =
            unsafe { &(&(*info).ii_IndexAttrNumbers)[..(*info).ii_NumIndexAttrs as usize] };
        attnos.iter().all(|&attno| {
            let i = attno as usize - 1;
            old.datum(attno as usize) == (!new.1[i]).then(|| new.0[i])
        })
    }
}
