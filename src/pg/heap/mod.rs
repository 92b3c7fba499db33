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
//!
//! The files: `layout` (what a table's indexes are, cached per backend), `checks` (what
//! `Table::open` refuses and why), `read` (look-ups), `write` (inserts, updates, deletes, row
//! locks), and `scan` (the tenant cache's scan of the latest committed rows by a text column).

mod checks;
mod layout;
mod read;
mod scan;
mod write;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::PgTupleDesc;

pub use layout::{Layout, PrimaryKey};
pub use read::{Found, Holder, Snap};
pub use scan::scan_latest_by_text;
pub use write::{Inserted, Write};

use layout::generation;

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

/// Why a layout found before could not open its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// The table or one of its indexes changed since the layout was found: find it again.
    Stale,
    /// The table was dropped.
    Gone,
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
