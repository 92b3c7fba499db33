//! `Layout`: what a table's indexes are, and that this module can write the table, found once
//! by a look-up of the catalogs and cached per backend until PostgreSQL invalidates the table or
//! an index (`pg::caches`). Apart because it alone reads the catalogs and watches invalidations.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::PgTupleDesc;

use super::checks::{check_index, check_writable};
use super::Table;
use crate::pg::caches::{self, Depends};

/// What a table's indexes are (their OIDs, and the IndexInfo the index access methods take),
/// and that the table is one this module can write as the executor would: found by a look-up
/// of the catalogs, kept per backend by the caller, and valid until PostgreSQL invalidates the
/// table or one of its indexes (`Table::open` then answers `Stale`). Its IndexInfos live in a
/// memory context of their own, deleted with the layout.
pub struct Layout {
    pub(super) relid: pg_sys::Oid,
    pub(super) indexes: Vec<(pg_sys::Oid, *mut pg_sys::IndexInfo)>,
    memory: pg_sys::MemoryContext,
    /// `caches::generation(Depends::Relations)` when the look-up began
    pub(super) generation: u64,
    /// The fewest columns a row is written with (`Table::form` leaves trailing NULLs off): one
    /// past the last column that has a "missing" value (atthasmissing: added with a default that
    /// was dropped since), which a row without that column would read instead of NULL.
    pub(super) least_natts: usize,
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

pub(super) fn generation() -> u64 {
    caches::generation(Depends::Relations)
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
    pub(super) unsafe fn prefix(&self, full: pg_sys::TupleDesc, natts: usize) -> pg_sys::TupleDesc {
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
pub struct PrimaryKey(pub(super) usize);

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
