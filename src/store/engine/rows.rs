//! Key rows as idem.keys holds them: a look-up's datums decoded into a `KeyRow`, a `RowWrite`
//! turned into datums and written, and where this backend last wrote a key. Apart from the
//! operations, which decide what to write and leave the datums to this file.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use super::Keys;
use crate::errors;
use crate::pg::datum::CallMemory;
use crate::pg::heap::{Found, Inserted, Snap, Write, Written};
use crate::pg::time::{interval, interval_micros};
use crate::rules::key_row::{state_code, stored_hash, KeyRow, StoredRow};
use crate::rules::row_write::{Assign, Column, RowWrite, Value};
use crate::store::snapshot_per_transaction;

// ---------------------------------------------------------------------------------------------
// Rows and values
// ---------------------------------------------------------------------------------------------

impl Keys {
    pub(super) fn find(&self, tenant: &str, key: &str, snap: Snap) -> Option<Found> {
        self.table
            .find(self.catalog.primary_key, &[tenant, key], snap)
    }

    fn i64_of(&self, found: &Found, column: Column) -> Option<i64> {
        found
            .datum(self.catalog.columns.of(column))
            .map(|d| d.value() as i64)
    }

    /// The key row a look-up found, its jsonb copied into `memory`.
    pub(super) fn key_row<'m>(&self, found: &Found, memory: CallMemory<'m>) -> KeyRow<'m> {
        let c = &self.catalog.columns;
        let datum = |column: Column| found.datum(c.of(column));
        KeyRow::decode(StoredRow {
            fence: self.i64_of(found, Column::Fence),
            state: datum(Column::State).map(|d| d.value() as i8),
            request_hash: datum(Column::RequestHash).map(|d| {
                // SAFETY: request_hash is a bytea column (checked by `definition`); the value
                // lives with `found`.
                stored_hash(unsafe { <&[u8] as FromDatum>::from_datum(d, false) }.unwrap_or(&[]))
            }),
            attempt: datum(Column::Attempt).map(|d| d.value() as i32),
            response_code: datum(Column::ResponseCode).map(|d| d.value() as i32),
            // SAFETY: response_body is a jsonb column; the value lives with `found`.
            response_body: datum(Column::ResponseBody).map(|d| unsafe { memory.copy_jsonb(d) }),
            lease_expires_at: self.i64_of(found, Column::LeaseExpiresAt),
            expires_at: self.i64_of(found, Column::ExpiresAt),
            purge_after: self.i64_of(found, Column::PurgeAfter),
            ttl: datum(Column::Ttl).map(interval_micros),
            checkpoint: (
                datum(Column::CheckpointPhase)
                    // SAFETY: checkpoint_phase is a text column; the value lives with `found`.
                    .and_then(|d| unsafe { <&str as FromDatum>::from_datum(d, false) })
                    .map(str::to_owned),
                // SAFETY: checkpoint_data is a jsonb column; the value lives with `found`.
                datum(Column::CheckpointData).map(|d| unsafe { memory.copy_jsonb(d) }),
            ),
        })
    }

    /// The values of the row `write` makes: of `found` (the key's latest version) with the
    /// write's columns changed, or of a new row for `tenant`/`key` (the write sets every column).
    pub(super) fn row_after(
        &self,
        found: Option<&Found>,
        tenant: &str,
        key: &str,
        write: &RowWrite<'_>,
    ) -> (Vec<pg_sys::Datum>, Vec<bool>) {
        let c = &self.catalog.columns;
        let natts = self.table.natts();
        let (mut values, mut nulls) = match found {
            Some(found) => (found.values.clone(), found.nulls.clone()),
            None if write.is_whole_row() => {
                let (mut values, mut nulls) =
                    (vec![pg_sys::Datum::from(0); natts], vec![true; natts]);
                set(&mut values, &mut nulls, c.tenant, tenant.into_datum());
                set(&mut values, &mut nulls, c.key, key.into_datum());
                (values, nulls)
            }
            None => errors::internal("writing a new key", "not every column is set").raise(),
        };
        for (column, assign) in write.assignments() {
            let datum = match assign {
                Assign::To(value) => datum_of(value),
                Assign::AtMost(bound) => {
                    let kept = found.and_then(|f| self.i64_of(f, column));
                    Some(pg_sys::Datum::from(kept.map_or(bound, |k| k.min(bound))))
                }
            };
            set(&mut values, &mut nulls, c.of(column), datum);
        }
        (values, nulls)
    }
}

/// A value of `rules::row_write` as a datum of its column; None for NULL. Values passed by
/// reference (bytea, text, interval, jsonb) are allocated in the current memory context.
fn datum_of(value: Value<'_>) -> Option<pg_sys::Datum> {
    match value {
        Value::Null => None,
        Value::Int8(v) | Value::Time(v) => Some(pg_sys::Datum::from(v)),
        Value::Int4(v) => Some(pg_sys::Datum::from(v)),
        Value::State(state) => Some(pg_sys::Datum::from(state_code(state))),
        Value::Hash(hash) => hash.as_slice().into_datum(),
        Value::Duration(micros) => interval(micros).into_datum(),
        Value::Text(text) => text.into_datum(),
        Value::Jsonb(value) => value.into_datum(),
    }
}

fn set(
    values: &mut [pg_sys::Datum],
    nulls: &mut [bool],
    attno: usize,
    value: Option<pg_sys::Datum>,
) {
    values[attno - 1] = value.unwrap_or(pg_sys::Datum::from(0));
    nulls[attno - 1] = value.is_none();
}

/// The engine's one answer to a write that found its row changed by a transaction that
/// committed after the row was read: at REPEATABLE READ and SERIALIZABLE a serialization failure
/// (40001), as the executor raises; at READ COMMITTED the caller reads the key again.
pub(super) fn changed_under(function: &str, tenant: &str, key: &str) {
    if snapshot_per_transaction() {
        errors::serialization_failure(function, tenant, key).raise()
    }
}

/// What writing a row gave.
pub(super) enum Stored {
    /// Written.
    Yes,
    /// Another transaction inserted the key since it was read: this one's row was taken back.
    Taken,
    /// Another running transaction changes or locks the row.
    HeldBy(pg_sys::TransactionId),
    /// A transaction committed a change to the row after it was read.
    Changed,
}

/// Inserts the key's row as `write` makes it, or writes it over `seen` (the key's latest
/// version) without waiting; remembers where it went (`OwnRow`).
pub(super) fn write_row(
    keys: &Keys,
    seen: Option<&Found>,
    tenant: &str,
    key: &str,
    write: &RowWrite<'_>,
) -> Stored {
    let (mut values, mut nulls) = keys.row_after(seen, tenant, key, write);
    let stored = match seen {
        None => match keys
            .table
            .insert(keys.catalog.primary_key, &mut values, &mut nulls)
        {
            Inserted::Yes => Stored::Yes,
            Inserted::Taken => Stored::Taken,
        },
        Some(found) => match keys.table.update(found, &mut values, &mut nulls, false) {
            Write::Done => Stored::Yes,
            Write::Busy(xid) => Stored::HeldBy(xid),
            Write::Changed => Stored::Changed,
        },
    };
    if matches!(stored, Stored::Yes) {
        keys.remember_written(tenant, key);
    }
    stored
}

// ---------------------------------------------------------------------------------------------
// The key this backend last wrote
// ---------------------------------------------------------------------------------------------

/// Where this backend last wrote a key. A transaction that claims a key and completes it in the
/// same transaction (the usual case) finds its row here instead of descending the index again;
/// `Table::fetch_own` checks that the row there is still this transaction's latest version, so
/// a stale entry (another transaction, a rolled back subtransaction, a later write) only sends
/// the call back to the index.
struct OwnRow {
    tenant: String,
    key: String,
    written: Written,
}

thread_local! {
    static OWN_ROW: RefCell<Option<OwnRow>> = const { RefCell::new(None) };
}

impl Keys {
    /// Remembers where the table's last write of `tenant`/`key` went.
    pub(super) fn remember_written(&self, tenant: &str, key: &str) {
        if let Some(written) = self.table.written() {
            OWN_ROW.with(|own| {
                let mut own = own.borrow_mut();
                match own.as_mut() {
                    Some(row) if row.tenant == tenant && row.key == key => row.written = written,
                    _ => {
                        *own = Some(OwnRow {
                            tenant: tenant.to_owned(),
                            key: key.to_owned(),
                            written,
                        })
                    }
                }
            });
        }
    }

    /// This transaction's own latest version of the key, where it last wrote it; None when
    /// that is not known (the index knows).
    pub(super) fn own_row(&self, tenant: &str, key: &str) -> Option<Found> {
        let written = OWN_ROW.with(|own| {
            own.borrow()
                .as_ref()
                .filter(|row| row.tenant == tenant && row.key == key)
                .map(|row| row.written)
        })?;
        let found = self.table.fetch_own(&written)?;
        let c = &self.catalog.columns;
        // SAFETY: tenant and key are text columns; the values live with `found`.
        let same_key = |attno: usize, value: &str| unsafe {
            found
                .datum(attno)
                .and_then(|d| <&str as FromDatum>::from_datum(d, false))
                == Some(value)
        };
        (same_key(c.tenant, tenant) && same_key(c.key, key)).then_some(found)
    }
}
