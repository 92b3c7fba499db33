//! The scan only the tenant cache uses (`tenants::access`): rows of the latest committed state
//! whose text column equals a key, read without a `Table` or its layout. Apart from the engine's
//! tuple reads and writes, with which it shares only the scan key (`text_equals`).

use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum, PgTupleDesc};

use crate::errors;

/// A scan key: the text attribute `attno` equals `value`, compared with `collation`.
pub(super) fn text_equals(
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
