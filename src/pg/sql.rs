//! SQL statements through SPI, for what pg_idem does with SQL: the key store's SPI path, the
//! purge, stream watermarks, tenant grants. Each statement is prepared once per backend and
//! kept; every connection runs as the extension's owner with search_path pinned
//! (`owner::as_extension_owner`), so the statements see what a `SECURITY DEFINER SET
//! search_path` function would, and they qualify every name and operator besides.
//!
//! No policy here: the statements are the callers'.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use pgrx::{FromDatum, Spi};

use crate::errors;
use crate::pg::datum::{CallMemory, Jsonb};
use crate::pg::owner;
use crate::pg::time::Micros;

/// An SPI connection.
pub struct Client<'a, 'c> {
    spi: &'a SpiClient<'c>,
}

/// Runs `f` with an SPI connection, as the extension's owner. Values `f` returns that point into
/// PostgreSQL memory (jsonb) must be copied out of SPI first (`get_jsonb`).
pub fn with_client<R>(f: impl FnOnce(&Client<'_, '_>) -> R) -> R {
    owner::as_extension_owner(|| Spi::connect(|spi| f(&Client { spi })))
}

thread_local! {
    /// Plans prepared in this backend, by statement text; the argument types are those of the
    /// first execution's arguments.
    static PLANS: RefCell<HashMap<String, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

impl<'c> Client<'_, 'c> {
    /// Runs a statement through its per-backend plan, preparing it on first use.
    pub fn run(&self, sql: &str, args: &[DatumWithOid<'_>]) -> SpiTupleTable<'c> {
        let cached = PLANS.with(|plans| plans.borrow().get(sql).cloned());
        let plan = cached.unwrap_or_else(|| {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let plan = Rc::new(
                self.spi
                    .prepare_mut(sql, &types)
                    .unwrap_or_else(|e| errors::internal("preparing a statement", e).raise())
                    .keep(),
            );
            PLANS.with(|plans| plans.borrow_mut().insert(sql.to_string(), plan.clone()));
            plan
        });
        // `select` leaves the transaction read-only until a statement writes; the plan itself
        // is prepared as mutating, so each execution takes a fresh snapshot (READ COMMITTED)
        self.spi
            .select(&*plan, None, args)
            .unwrap_or_else(|e| errors::internal("executing a statement", e).raise())
    }

    /// The first column of the first row of a statement, as bigint; None without rows or for
    /// NULL.
    pub fn query_one_i64(&self, sql: &str, args: &[DatumWithOid<'_>]) -> Option<i64> {
        first_row(self.run(sql, args)).and_then(|t| get_i64(&t, 1))
    }
}

/// The first row of a result, None when it has none.
pub fn first_row(table: SpiTupleTable<'_>) -> Option<SpiTupleTable<'_>> {
    if table.is_empty() {
        None
    } else {
        Some(table.first())
    }
}

/// The raw datum of a column of the current row, None for NULL.
pub fn raw(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<pg_sys::Datum> {
    table
        .get_datum_by_ordinal(ordinal)
        .unwrap_or_else(|e| errors::internal("reading a column", e).raise())
}

pub fn get_i64(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i64> {
    raw(table, ordinal).map(|d| d.value() as i64)
}

pub fn get_i32(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i32> {
    raw(table, ordinal).map(|d| d.value() as i32)
}

pub fn get_i8(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i8> {
    raw(table, ordinal).map(|d| d.value() as i8)
}

pub fn get_string(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<String> {
    raw(table, ordinal)
        // SAFETY: callers pass the ordinal of a text column; the datum lives as long as the row.
        .and_then(|d| unsafe { <&str as FromDatum>::from_datum(d, false) })
        .map(str::to_owned)
}

pub fn get_bytes(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<Vec<u8>> {
    raw(table, ordinal)
        // SAFETY: callers pass the ordinal of a bytea column; the datum lives as long as the row.
        .and_then(|d| unsafe { <&[u8] as FromDatum>::from_datum(d, false) })
        .map(<[u8]>::to_vec)
}

/// A jsonb column copied into `memory`, the memory context of the SQL function being called, so
/// that it outlives SPI and is freed with the function's result rather than with the portal.
pub fn get_jsonb<'m>(
    table: &SpiTupleTable<'_>,
    ordinal: usize,
    memory: CallMemory<'m>,
) -> Option<Jsonb<'m>> {
    // SAFETY: callers pass the ordinal of a jsonb column; it is copied before SPI frees the row.
    raw(table, ordinal).map(|d| unsafe { memory.copy_jsonb(d) })
}

pub fn timestamptz_arg<'a>(micros: Micros) -> DatumWithOid<'a> {
    // SAFETY: TimestampTz is an int64 passed by value, so the datum is the value itself.
    unsafe { DatumWithOid::new(micros, pg_sys::TIMESTAMPTZOID) }
}

pub fn interval_arg<'a>(micros: Micros) -> DatumWithOid<'a> {
    crate::pg::time::interval(micros).into()
}
