//! Rows of a plain heap table, read through a btree index and written through the heap and
//! index access methods, without the executor: what PostgreSQL's `CatalogTupleInsert` and
//! `CatalogTupleUpdate` do for the system catalogs, with the concurrency results the caller
//! needs instead of "tuple concurrently updated" errors (wait or not, and who holds a row).
//!
//! No policy here: the key store decides what to read and write. The differences between
//! PostgreSQL versions live in `pg_version`.
//!
//! What the executor would do and this module does too: heap_insert/heap_update/heap_delete
//! (WAL, TOAST, visibility map, statistics, predicate locks for SERIALIZABLE, replica identity
//! for logical decoding are theirs), an entry in every index for each new row version that is
//! not heap-only, unique checks, a command counter increment after each write. What it cannot
//! do, and so refuses to open (`Table::open` says why): triggers (but pg_idem's own
//! `lift_fence_clock`, which the engine's writes need not fire), row level security, CHECK
//! constraints, generated columns, partitioning, another table access method, indexes that are
//! not plain btree indexes on columns (expressions, predicates, exclusion constraints, deferred
//! uniqueness), rules, a replica identity other than the primary key, and publications that
//! filter rows or columns (the executor checks those against the replica identity).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum, PgTupleDesc};

use crate::errors;
use crate::pg::caches::{self, Depends};
use crate::pg::pg_version;

/// A table opened with RowExclusiveLock for reads and writes without the executor. Its indexes
/// are opened when a call first needs them (a look-up needs the primary key only, a HOT update
/// none). Closed (locks kept until the end of the transaction) when dropped.
pub struct Table {
    rel: pg_sys::Relation,
    layout: Rc<Layout>,
    /// The open index relations, by position in `layout.indexes`; null until opened.
    opened: RefCell<Vec<pg_sys::Relation>>,
    /// Where the row version this table last inserted or updated went (`written`).
    written: Cell<Option<Written>>,
}

/// Where a row version was written, and by which transaction into which file: what
/// `Table::fetch_own` needs to find it again without an index.
#[derive(Clone, Copy)]
pub struct Written {
    tid: pg_sys::ItemPointerData,
    xid: pg_sys::TransactionId,
    relfilenode: pg_sys::Oid,
}

/// What a table's indexes are (their OIDs, and the IndexInfo the index access methods take),
/// and that the table is one this module can write as the executor would: found by a look-up
/// of the catalogs, kept per backend by the caller, and valid until PostgreSQL invalidates the
/// table or one of its indexes (`Table::open` then answers `Stale`). Its IndexInfos live in a
/// memory context of their own, deleted with the layout.
pub struct Layout {
    relid: pg_sys::Oid,
    indexes: Vec<(pg_sys::Oid, *mut pg_sys::IndexInfo)>,
    memory: pg_sys::MemoryContext,
    /// `caches::generation(Depends::Relations)` when the look-up began
    generation: u64,
    /// The fewest columns a row is written with (`Table::form` leaves trailing NULLs off): one
    /// past the last column that has a "missing" value (atthasmissing: added with a default that
    /// was dropped since), which a row without that column would read instead of NULL.
    least_natts: usize,
    /// Descriptors of the table's first n columns, at index n, for rows that leave the rest
    /// off: made on first use, in `memory`.
    prefixes: RefCell<Vec<pg_sys::TupleDesc>>,
}

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: the context was created by `Layout::load` and only this layout uses it; a
        // Table that still points into it holds an Rc of this layout, so none does any more.
        unsafe { pg_sys::MemoryContextDelete(self.memory) };
    }
}

/// Layouts are stale once their table or one of its indexes is invalidated (a pg_index change,
/// such as an index becoming ready for inserts, invalidates the index, not always the table).
fn watch(relids: impl IntoIterator<Item = pg_sys::Oid>) {
    caches::watch(Depends::Relations, relids);
}

fn generation() -> u64 {
    caches::generation(Depends::Relations)
}

/// Why a layout found before could not open its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// The table or one of its indexes changed since the layout was found: find it again.
    Stale,
    /// The table was dropped.
    Gone,
}

impl Layout {
    /// Finds the layout of the table `relid`, and opens the table with RowExclusiveLock; Err
    /// names what the executor would have to do for it that this module does not, or says that
    /// it no longer exists.
    pub fn load(relid: pg_sys::Oid) -> Result<(Rc<Layout>, Table), &'static str> {
        watch([relid]);
        let generation = generation();
        // SAFETY: try_table_open returns NULL for a relation dropped since its OID was looked
        // up; taking the lock processes the invalidations others committed, so what is read
        // below is the table as it is now.
        let rel = unsafe { pg_sys::try_table_open(relid, pg_sys::RowExclusiveLock as i32) };
        if rel.is_null() {
            return Err("it was dropped");
        }
        // SAFETY: a new memory context under CacheMemoryContext, owned by the layout.
        let memory = unsafe {
            pg_sys::AllocSetContextCreateExtended(
                pg_sys::CacheMemoryContext,
                c"pg_idem table layout".as_ptr(),
                pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
                pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
                pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
            )
        };
        // SAFETY: rel is open; its descriptor has one attribute per column.
        let least_natts = unsafe { PgTupleDesc::from_pg_unchecked((*rel).rd_att) }
            .iter()
            .enumerate()
            .filter(|(_, a)| a.atthasmissing)
            .last()
            .map_or(0, |(i, _)| i + 1);
        let mut layout = Layout {
            relid,
            indexes: Vec::new(),
            memory,
            generation,
            least_natts,
            prefixes: RefCell::new(Vec::new()),
        };
        let checked = check_writable(rel);
        let mut opened = Vec::new();
        if checked.is_ok() {
            // SAFETY: rel is open; RelationGetIndexList returns a fresh list of index OIDs.
            let oids = oid_list(unsafe { pg_sys::RelationGetIndexList(rel) });
            watch(oids.iter().copied());
            for oid in oids {
                // SAFETY: an index of the open table, opened with the lock INSERT takes on
                // indexes (kept by the Table below); its IndexInfo is built in the layout's own
                // context.
                let (index, info) = unsafe {
                    let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                    let old = pg_sys::MemoryContextSwitchTo(memory);
                    let info = pg_sys::BuildIndexInfo(index);
                    pg_sys::MemoryContextSwitchTo(old);
                    (index, info)
                };
                layout.indexes.push((oid, info));
                opened.push(index);
            }
        }
        let table = Table {
            rel,
            opened: RefCell::new(opened),
            layout: Rc::new(layout),
            written: Cell::new(None),
        };
        checked?;
        for (position, &(_, info)) in table.layout.indexes.iter().enumerate() {
            // SAFETY: the index is open (above) and info its IndexInfo.
            unsafe { check_index(table.index(position), info) }?;
        }
        Ok((table.layout.clone(), table))
    }

    /// A descriptor of the first `natts` columns of `full`, the descriptor of this layout's
    /// table.
    ///
    /// SAFETY: `full` is the descriptor of the open table this layout was found for, and the
    /// layout is current (`Table::open`); `natts` is at most its number of attributes.
    unsafe fn prefix(&self, full: pg_sys::TupleDesc, natts: usize) -> pg_sys::TupleDesc {
        let mut prefixes = self.prefixes.borrow_mut();
        if prefixes.len() <= natts {
            prefixes.resize(natts + 1, std::ptr::null_mut());
        }
        if prefixes[natts].is_null() {
            // SAFETY: a new descriptor in the layout's own context, which lives as long as the
            // layout; TupleDescCopyEntry copies what forming a tuple reads of each attribute
            // (length, alignment, by value, storage) from the caller's descriptor, and no
            // column changes without an invalidation that makes the layout stale first.
            prefixes[natts] = unsafe {
                let old = pg_sys::MemoryContextSwitchTo(self.memory);
                let prefix = pg_sys::CreateTemplateTupleDesc(natts as i32);
                for attno in 1..=natts as pg_sys::AttrNumber {
                    pg_sys::TupleDescCopyEntry(prefix, attno, full, attno);
                }
                pg_sys::MemoryContextSwitchTo(old);
                prefix
            };
        }
        prefixes[natts]
    }

    /// Which index is the table's primary key, valid and on exactly the columns `columns`
    /// (attribute numbers, in order); None when there is no such index.
    pub fn primary_key(&self, table: &Table, columns: &[usize]) -> Option<PrimaryKey> {
        (0..self.indexes.len())
            .find(|&position| {
                let (index, info) = (table.index(position), self.indexes[position].1);
                // SAFETY: index is open and info its IndexInfo; rd_index is the index's
                // pg_index row as of the lock taken when the table was opened.
                unsafe {
                    let form = &*(*index).rd_index;
                    let keys =
                        &(&(*info).ii_IndexAttrNumbers)[..(*info).ii_NumIndexKeyAttrs as usize];
                    // a primary key has its columns' own collations and default operator
                    // classes: PostgreSQL refuses any other index as one
                    form.indisprimary
                        && form.indisvalid
                        && keys.len() == columns.len()
                        && keys.iter().zip(columns).all(|(&k, &c)| k as usize == c)
                }
            })
            .map(PrimaryKey)
    }
}

/// The position of the primary key among a table's indexes (`Layout::primary_key`).
#[derive(Clone, Copy)]
pub struct PrimaryKey(usize);

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
    /// Opens the table of a layout found before, with RowExclusiveLock. Taking the lock
    /// processes the invalidations other sessions committed (a REINDEX CONCURRENTLY that
    /// swapped an index in, a dropped index, a new one, a trigger): if one of them concerns
    /// the table or its indexes, the layout is stale and the caller finds it again.
    pub fn open(layout: &Rc<Layout>) -> Result<Table, Open> {
        // SAFETY: try_table_open returns NULL for a relation dropped since; otherwise the
        // pointer stays valid while the table is open, until `Drop`.
        let rel = unsafe { pg_sys::try_table_open(layout.relid, pg_sys::RowExclusiveLock as i32) };
        if rel.is_null() {
            return Err(Open::Gone);
        }
        let table = Table {
            rel,
            opened: RefCell::new(vec![std::ptr::null_mut(); layout.indexes.len()]),
            layout: layout.clone(),
            written: Cell::new(None),
        };
        if generation() != layout.generation {
            return Err(Open::Stale);
        }
        Ok(table)
    }

    /// The index at `position` of the layout, opened on first use in this call.
    fn index(&self, position: usize) -> pg_sys::Relation {
        let opened = self.opened.borrow()[position];
        if !opened.is_null() {
            return opened;
        }
        // SAFETY: an index of this table as of the table's lock (the layout is current), with
        // the lock INSERT takes on indexes; closed in Drop.
        let index = unsafe {
            pg_sys::index_open(
                self.layout.indexes[position].0,
                pg_sys::RowExclusiveLock as i32,
            )
        };
        self.opened.borrow_mut()[position] = index;
        index
    }

    /// Where the row version this table last inserted or updated is (for `fetch_own`).
    pub fn written(&self) -> Option<Written> {
        self.written.get()
    }

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

    pub fn relid(&self) -> pg_sys::Oid {
        // SAFETY: self.rel is open.
        unsafe { (*self.rel).rd_id }
    }

    fn descriptor(&self) -> PgTupleDesc<'_> {
        // SAFETY: the relation's descriptor lives as long as the open relation, which outlives
        // the borrow; from_pg_unchecked never frees it.
        unsafe { PgTupleDesc::from_pg_unchecked((*self.rel).rd_att) }
    }

    /// The attribute number of a column, by name.
    pub fn attno(&self, name: &str) -> Option<usize> {
        self.descriptor()
            .iter()
            .position(|a| !a.attisdropped && a.name() == name)
            .map(|i| i + 1)
    }

    /// The number of attributes of the table's rows (dropped columns included).
    pub fn natts(&self) -> usize {
        self.descriptor().len()
    }

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

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: closes what `open` opened; NoLock keeps the locks until the end of the
        // transaction, as the executor does.
        unsafe {
            for &index in self.opened.borrow().iter() {
                if !index.is_null() {
                    pg_sys::index_close(index, pg_sys::NoLock as i32);
                }
            }
            pg_sys::table_close(self.rel, pg_sys::NoLock as i32);
        }
    }
}

/// Whether the executor would do anything for a write to `rel` that this module does not.
fn check_writable(rel: pg_sys::Relation) -> Result<(), &'static str> {
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

/// A live column of a table, as the relcache describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub type_oid: pg_sys::Oid,
    pub typmod: i32,
    pub collation: pg_sys::Oid,
    pub not_null: bool,
    pub has_default: bool,
    /// GENERATED ... AS IDENTITY or GENERATED ALWAYS AS (...)
    pub generated: bool,
}

/// The live columns of the table `relid` (dropped ones left out), with AccessShareLock (kept
/// until the end of the transaction, as the executor keeps its locks); None when it is gone.
pub fn columns_of(relid: pg_sys::Oid) -> Option<Vec<Column>> {
    // SAFETY: try_table_open returns NULL for a dropped relation; otherwise the descriptor is
    // valid until the table is closed below, and every field read is plain data of it.
    unsafe {
        let rel = pg_sys::try_table_open(relid, pg_sys::AccessShareLock as i32);
        if rel.is_null() {
            return None;
        }
        let descriptor = PgTupleDesc::from_pg_unchecked((*rel).rd_att);
        let columns = descriptor
            .iter()
            .filter(|a| !a.attisdropped)
            .map(|a| Column {
                name: a.name().to_owned(),
                type_oid: a.atttypid,
                typmod: a.atttypmod,
                collation: a.attcollation,
                not_null: a.attnotnull,
                has_default: a.atthasdef,
                generated: a.attidentity != 0 || a.attgenerated != 0,
            })
            .collect();
        drop(descriptor);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        Some(columns)
    }
}

/// A scan key: the text attribute `attno` equals `value`, compared with `collation`.
fn text_equals(
    attno: pg_sys::AttrNumber,
    collation: pg_sys::Oid,
    value: &str,
) -> pg_sys::ScanKeyData {
    let datum = value
        .into_datum()
        .unwrap_or_else(|| errors::internal("building a scan key", "NULL text").raise());
    // SAFETY: a zeroed ScanKeyData is filled in completely by ScanKeyEntryInitialize; the datum
    // is a text palloc'd in the current memory context, which outlives the scan.
    unsafe {
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyEntryInitialize(
            &mut key,
            0,
            attno,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::InvalidOid,
            collation,
            pg_sys::RegProcedure::from(pg_sys::F_TEXTEQ),
            datum,
        );
        key
    }
}

/// A row found by `scan_latest_by_text`, deformed with its table's descriptor.
pub struct ScannedRow<'a> {
    descriptor: &'a PgTupleDesc<'a>,
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
}

impl ScannedRow<'_> {
    /// The value of the column `name` if it is an oid (or a reg* type, such as regrole) and
    /// not NULL; None otherwise.
    pub fn oid_by_name(&self, name: &str) -> Option<pg_sys::Oid> {
        let (i, a) = self
            .descriptor
            .iter()
            .enumerate()
            .find(|(_, a)| !a.attisdropped && a.name() == name)?;
        let oid_like = [pg_sys::OIDOID, pg_sys::REGROLEOID].contains(&a.atttypid);
        (oid_like && !self.nulls[i]).then(|| {
            // SAFETY: an oid datum holds the OID by value.
            unsafe { pg_sys::Oid::from_datum(self.values[i], false) }.unwrap_or(pg_sys::InvalidOid)
        })
    }
}

/// A new snapshot of the latest committed state, for a scan of `relid` (no catalog). In
/// parallel mode (a parallel worker, or the leader while it runs a parallel plan) PostgreSQL
/// refuses GetLatestSnapshot (an internal error); the catalog snapshot for a relation that has
/// no syscache is taken afresh on every call (GetNonHistoricCatalogSnapshot), in every mode, as
/// parallel workers read their catalogs: the same latest committed state. A worker and its
/// leader may take theirs at slightly different moments, as two calls of one statement in a
/// serial plan do. Inside a transaction; the caller registers the snapshot before it scans.
fn latest_snapshot(relid: pg_sys::Oid) -> pg_sys::Snapshot {
    // SAFETY: reads of this backend's transaction state, and snapshots taken as PostgreSQL
    // takes them for its own scans (the caller is inside a transaction).
    unsafe {
        if pg_sys::IsInParallelMode() {
            pg_sys::GetCatalogSnapshot(relid)
        } else {
            pg_sys::GetLatestSnapshot()
        }
    }
}

/// Visits the rows of the table `relid` whose text column `column` equals `key`, through the
/// btree index `index` when there is one (InvalidOid: a sequential scan), until `visit` returns
/// true. The rows are those of the latest committed state (a fresh snapshot, as PostgreSQL
/// reads its catalogs), not of the transaction's snapshot. No privileges are checked: callers
/// read their own tables. Raises 55000 when the table has no such text column.
pub fn scan_latest_by_text(
    relid: pg_sys::Oid,
    index: pg_sys::Oid,
    column: &str,
    key: &str,
    mut visit: impl FnMut(&ScannedRow<'_>) -> bool,
) {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    // SAFETY: the table is opened and locked for the scan (the lock kept until the end of the
    // transaction, as a SELECT keeps it); the scan key names a heap column of type text (checked
    // first), which systable_beginscan maps to the index's column itself; the snapshot is
    // registered for the scan's duration; each tuple is deformed while the scan holds it.
    unsafe {
        let rel = pg_sys::table_open(relid, lock);
        let descriptor = PgTupleDesc::from_pg_unchecked((*rel).rd_att);
        let Some((position, attribute)) = descriptor
            .iter()
            .enumerate()
            .find(|(_, a)| !a.attisdropped && a.name() == column)
        else {
            errors::table_changed(relid, format!("Column {column} is missing.")).raise()
        };
        if attribute.atttypid != pg_sys::TEXTOID {
            errors::table_changed(relid, format!("Column {column} is not of type text.")).raise()
        }
        let collation = attribute.attcollation;
        let natts = descriptor.len();
        let mut values = vec![pg_sys::Datum::from(0); natts];
        let mut nulls = vec![true; natts];
        let mut scan_key = text_equals((position + 1) as pg_sys::AttrNumber, collation, key);
        let snapshot = pg_sys::RegisterSnapshot(latest_snapshot(relid));
        // an index a DBA rebuilt on other columns, with another collation or operator class,
        // or partial, could miss rows: the table is read whole instead
        let attno = (position + 1) as pg_sys::AttrNumber;
        let index = if index != pg_sys::InvalidOid && searches_all_rows_by(index, attno, collation)
        {
            index
        } else {
            pg_sys::InvalidOid
        };
        let use_index = index != pg_sys::InvalidOid;
        let scan = pg_sys::systable_beginscan(rel, index, use_index, snapshot, 1, &mut scan_key);
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            pg_sys::heap_deform_tuple(
                tuple,
                (*rel).rd_att,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            let row = ScannedRow {
                descriptor: &descriptor,
                values: &values,
                nulls: &nulls,
            };
            if visit(&row) {
                break;
            }
        }
        pg_sys::systable_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        drop(descriptor);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
    }
}

/// Whether the index `index` (of a table open in this transaction) finds every row whose column
/// `attno` equals a text value: valid, not partial, and its first key column ordering text as
/// that column does.
///
/// SAFETY: called inside a transaction; `index` is the OID of an index (a missing one gives
/// false).
unsafe fn searches_all_rows_by(
    index: pg_sys::Oid,
    attno: pg_sys::AttrNumber,
    collation: pg_sys::Oid,
) -> bool {
    // SAFETY: try_index_open returns NULL for an index dropped meanwhile; the lock is the one a
    // SELECT takes, kept to the end of the transaction; rd_index is its pg_index row.
    unsafe {
        let rel = pg_sys::try_index_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return false;
        }
        let usable = (*(*rel).rd_index).indisvalid
            && pg_sys::RelationGetIndexPredicate(rel).is_null()
            && orders_text_as_column(rel, 0, attno, collation);
        pg_sys::index_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        usable
    }
}

/// SAFETY: `index` is an open index and `info` its IndexInfo.
unsafe fn check_index(
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

/// Whether key column `position` (0-based) of the open btree `index` orders and equates text as
/// the table's column `attno` does: that very column (not an expression), the default text
/// operator family, and the column's own collation. Another collation or a pattern operator
/// class may sort, or even equate, values otherwise, and a search through it could miss a row.
///
/// SAFETY: `index` is an open index relation.
unsafe fn orders_text_as_column(
    index: pg_sys::Relation,
    position: usize,
    attno: pg_sys::AttrNumber,
    collation: pg_sys::Oid,
) -> bool {
    // SAFETY: the caller's promise; rd_index, rd_opfamily and rd_indcollation have one entry per
    // key column, checked against indnkeyatts first.
    unsafe {
        let form = &*(*index).rd_index;
        position < form.indnkeyatts as usize
            && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
            && *form
                .indkey
                .values
                .as_slice(position + 1)
                .get_unchecked(position)
                == attno
            && *(*index).rd_opfamily.add(position) == pg_sys::TEXT_BTREE_FAM_OID
            && *(*index).rd_indcollation.add(position) == collation
    }
}

/// The OIDs of a list of OIDs.
fn oid_list(list: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a non-NIL T_OidList: `length` cells, each holding an oid_value.
    unsafe {
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).oid_value)
            .collect()
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
