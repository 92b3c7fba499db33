//! The key store without the executor: idem.keys read through its primary key index and written
//! with the heap and index access methods (`crate::pg::heap`), for every hot path (claim, complete,
//! fail, release, heartbeat, checkpoint, assert_fence, forget). Chosen once per backend (again
//! after any change to idem.keys) when idem.keys is a plain heap table `heap::Table` can write
//! exactly as the executor would, and Citus is not installed (Citus must plan every statement
//! on a distributed idem.keys); otherwise `spi` runs.
//!
//! Concurrency, with no lock held for a key (only the speculative insertion's token lock while
//! a new row's index entries are written, as for INSERT ... ON CONFLICT):
//! - At READ COMMITTED a claim reads the key's latest version, committed or not
//!   (SnapshotDirty): one index descent tells what the key holds and whether another
//!   transaction is writing it. A replay, in_progress or mismatch needs no write. Another
//!   transaction inserting the key, or updating, deleting or locking it, means `in_progress` at
//!   once when the claim would have to write (a purge of an expired row is waited for instead:
//!   it is short and the key is as good as absent); only a version another transaction is
//!   inserting sends the claim to the committed version, through its snapshot, for the answer.
//!   At REPEATABLE READ and SERIALIZABLE the claim answers from its snapshot and reads the
//!   latest version only before it writes (a change committed after the snapshot is 40001).
//! - A new key is inserted speculatively with btree's partial unique check on the primary key:
//!   if another transaction inserted the key since it was read (running or committed), the row
//!   is killed at once (heap_abort_speculative: no session sees it from then on) and the claim reads the key again, so two claims never both hold it and
//!   neither waits. An existing row is updated without waiting (a holder that locks it first
//!   wins, and the claim answers `in_progress`).
//! - Every write leaves the row's xmin or xmax set to the transaction until it ends, which is
//!   how later claims see an attempt in flight, and how a transaction recognizes its own
//!   attempt: a claim never takes over an attempt its own transaction holds.
//! - Fenced operations wait for the row as UPDATE does; when a committed transaction changed
//!   it meanwhile, they read the key again and check the fence again (READ COMMITTED), or fail
//!   with 40001 (REPEATABLE READ, SERIALIZABLE), as the executor's UPDATE would.

use std::cell::RefCell;
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use super::definition::{self, Verdict};
use super::{fences, prevent_if_read_only, snapshot_per_transaction, wait_for};
use crate::errors;
use crate::pg::caches::{self, Depends};
use crate::pg::datum::CallMemory;
use crate::pg::heap::{Found, Holder, Inserted, Layout, PrimaryKey, Snap, Table, Write, Written};
use crate::pg::time::{interval, interval_micros, Micros};
use crate::rules::claims::{plan, ClaimOutcome, ClaimRequest, Plan, CLAIM_ROUNDS};
use crate::rules::consumes::{plan_consume, ConsumePlan, ConsumeRequest, Consumed};
use crate::rules::fenced::{Effect, Fenced, FencedChange, FencedTimes, Refused};
use crate::rules::key_row::{stored_hash, KeyRow, MessageRows, StoredRow};
use crate::rules::row_write::{Assign, Column, RowWrite, Value};

/// Attribute numbers of idem.keys' columns: the two that name a key, and each one a write sets.
#[derive(Clone, Copy)]
struct Columns {
    tenant: usize,
    key: usize,
    written: [usize; Column::ALL.len()],
}

impl Columns {
    fn resolve(table: &Table) -> Result<Columns, &'static str> {
        let a = |name: &str| table.attno(name).ok_or("a column of idem.keys is missing");
        let mut written = [0; Column::ALL.len()];
        for column in Column::ALL {
            written[column as usize] = a(column.name())?;
        }
        Ok(Columns {
            tenant: a("tenant")?,
            key: a("key")?,
            written,
        })
    }

    fn of(&self, column: Column) -> usize {
        self.written[column as usize]
    }
}

/// What this backend knows about idem.keys, until the next invalidation of it or of one of its
/// indexes: its layout (which indexes, their IndexInfo) and which of them is the primary key
/// are found again then, because a REINDEX CONCURRENTLY gives the primary key a new OID and
/// drops the old index, and the invalidation that says so arrives while the table is opened.
struct Catalog {
    fence_seq: pg_sys::Oid,
    rows: MessageRows,
    columns: Columns,
    layout: Rc<Layout>,
    primary_key: PrimaryKey,
}

/// The decision of this backend, until the next invalidation of idem.keys.
enum Choice {
    Undecided,
    /// The SPI path (`store::spi`); `on_standby`: decided during recovery, so decided again
    /// once this server is promoted.
    Spi {
        on_standby: bool,
        rows: MessageRows,
    },
    Engine(Rc<Catalog>),
    /// One of pg_idem's own columns was changed: every call is refused (`definition`).
    Refused(String),
}

thread_local! {
    /// The decision, and the generation of `Depends::Relations` it was made at: idem.keys or one
    /// of its indexes changed since, or the relcache was reset, and it is made again.
    static CHOICE: RefCell<(u64, Choice)> = const { RefCell::new((0, Choice::Undecided)) };
}

fn oid_by_name(namespace: pg_sys::Oid, name: &std::ffi::CStr) -> pg_sys::Oid {
    // SAFETY: a syscache look-up by a NUL-terminated name; InvalidOid when missing.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), namespace) }
}

/// idem.keys opened for the engine, with what the engine knows about it.
pub struct Keys {
    table: Table,
    catalog: Rc<Catalog>,
}

/// Which back-end writes idem.keys for this call.
pub enum Opened {
    Engine(Keys),
    /// the SPI path, writing messages this way
    Spi(MessageRows),
}

impl Keys {
    /// How this table stores a consumed message.
    pub fn message_rows(&self) -> MessageRows {
        self.catalog.rows
    }
}

/// Opens idem.keys for the engine path, or says that the SPI path must run; raises 55000
/// when one of pg_idem's own columns was changed.
pub fn open() -> Opened {
    // SAFETY: a plain read of shared state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    let generation = caches::generation(Depends::Relations);
    let cached = CHOICE.with(|c| match &*c.borrow() {
        (decided, _) if *decided != generation => None,
        (_, Choice::Undecided) => None,
        (_, Choice::Spi { on_standby, .. }) if *on_standby && !standby => None,
        (_, Choice::Spi { rows, .. }) => Some(Err(*rows)),
        (_, Choice::Engine(catalog)) => Some(Ok(catalog.clone())),
        (_, Choice::Refused(difference)) => errors::keys_table_changed(difference).raise(),
    });
    match cached {
        Some(Err(rows)) => Opened::Spi(rows),
        // what changed since the decision was made (the invalidation arrives while the table
        // is opened) is decided again
        Some(Ok(catalog)) => match Table::open(&catalog.layout) {
            Ok(table) => Opened::Engine(Keys { table, catalog }),
            Err(_) => decide(standby),
        },
        None => decide(standby),
    }
}

/// Why the engine does not write idem.keys, or that it does.
enum Decision {
    Engine(Keys),
    /// why, and how messages are written
    Spi(String, MessageRows),
    Refused(String),
}

/// How messages are written when idem.keys could not even be read (missing, dropped): whole
/// rows are valid under every schema; the statement then fails as the executor decides.
const UNKNOWN_ROWS: MessageRows = MessageRows::Whole;

fn decide(standby: bool) -> Opened {
    // read before the look-up: an invalidation that arrives during it leaves the decision stale
    let generation = caches::generation(Depends::Relations);
    let (choice, opened) = match look_up(standby) {
        Decision::Engine(keys) => (Choice::Engine(keys.catalog.clone()), Opened::Engine(keys)),
        Decision::Spi(why, rows) => {
            pgrx::debug1!("pg_idem: idem.keys takes the SPI path (through the executor): {why}");
            (
                Choice::Spi {
                    on_standby: standby,
                    rows,
                },
                Opened::Spi(rows),
            )
        }
        Decision::Refused(difference) => {
            CHOICE.with(|c| *c.borrow_mut() = (generation, Choice::Refused(difference.clone())));
            errors::keys_table_changed(&difference).raise()
        }
    };
    CHOICE.with(|c| *c.borrow_mut() = (generation, choice));
    opened
}

fn look_up(standby: bool) -> Decision {
    // SAFETY: a catalog look-up by name; a missing schema gives InvalidOid (missing_ok).
    let namespace = unsafe { pg_sys::get_namespace_oid(c"idem".as_ptr(), true) };
    let relid = oid_by_name(namespace, c"keys");
    let fence_seq = oid_by_name(namespace, c"fence_seq");
    if [relid, fence_seq].contains(&pg_sys::InvalidOid) {
        return Decision::Spi(
            "idem.keys or idem.fence_seq is missing".into(),
            UNKNOWN_ROWS,
        );
    }
    caches::watch(Depends::Relations, [relid]);
    // pg_idem's own columns first, whichever path writes: no datum of another type is ever
    // read or written as one of them
    let Some(columns) = crate::pg::heap::columns_of(relid) else {
        return Decision::Spi("it was dropped".into(), UNKNOWN_ROWS);
    };
    let rows = match definition::compare(&columns) {
        Verdict::Changed(difference) => return Decision::Refused(difference),
        Verdict::Extended(_, rows) if standby => rows,
        Verdict::Extended(why, rows) => return Decision::Spi(why, rows),
        Verdict::Exact(rows) => rows,
    };
    if standby {
        // a hot standby: claims only read there, and table_open's RowExclusiveLock is refused
        return Decision::Spi("this server is a hot standby".into(), rows);
    }
    if crate::pg::cluster::citus_installed() {
        return Decision::Spi(
            "Citus is installed, and must plan every statement on idem.keys".into(),
            rows,
        );
    }
    let (layout, table) = match Layout::load(relid) {
        Ok(loaded) => loaded,
        Err(why) => return Decision::Spi(why.into(), rows),
    };
    let columns = match Columns::resolve(&table) {
        Ok(columns) => columns,
        Err(why) => return Decision::Spi(why.into(), rows),
    };
    let Some(primary_key) = layout.primary_key(&table, &[columns.tenant, columns.key]) else {
        return Decision::Spi("it has no valid primary key on (tenant, key)".into(), rows);
    };
    Decision::Engine(Keys {
        table,
        catalog: Rc::new(Catalog {
            fence_seq,
            rows,
            columns,
            layout,
            primary_key,
        }),
    })
}

// ---------------------------------------------------------------------------------------------
// Rows and values
// ---------------------------------------------------------------------------------------------

impl Keys {
    fn find(&self, tenant: &str, key: &str, snap: Snap) -> Option<Found> {
        self.table
            .find(self.catalog.primary_key, &[tenant, key], snap)
    }

    fn i64_of(&self, found: &Found, column: Column) -> Option<i64> {
        found
            .datum(self.catalog.columns.of(column))
            .map(|d| d.value() as i64)
    }

    /// The key row a look-up found, its jsonb copied into `memory`.
    fn key_row<'m>(&self, found: &Found, memory: CallMemory<'m>) -> KeyRow<'m> {
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
        })
    }

    /// The values of the row `write` makes: of `found` (the key's latest version) with the
    /// write's columns changed, or of a new row for `tenant`/`key` (the write sets every column).
    fn row_after(
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
        Value::State(state) => Some(pg_sys::Datum::from(state.code())),
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
fn changed_under(function: &str, tenant: &str, key: &str) {
    if snapshot_per_transaction() {
        errors::serialization_failure(function, tenant, key).raise()
    }
}

/// What writing a row gave.
enum Stored {
    /// Written: the values of the new row.
    Yes(Vec<pg_sys::Datum>, Vec<bool>),
    /// Another transaction inserted the key since it was read: this one's row was taken back.
    Taken,
    /// Another running transaction changes or locks the row.
    HeldBy(pg_sys::TransactionId),
    /// A transaction committed a change to the row after it was read.
    Changed,
}

/// Inserts the key's row as `write` makes it, or writes it over `seen` (the key's latest
/// version) without waiting; remembers where it went (`OwnRow`).
fn write_row(
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
            Inserted::Yes => Stored::Yes(values, nulls),
            Inserted::Taken => Stored::Taken,
        },
        Some(found) => match keys.table.update(found, &mut values, &mut nulls, false) {
            Write::Done => Stored::Yes(values, nulls),
            Write::Busy(xid) => Stored::HeldBy(xid),
            Write::Changed => Stored::Changed,
        },
    };
    if matches!(stored, Stored::Yes(..)) {
        keys.remember_written(tenant, key);
    }
    stored
}

// ---------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------

/// Who else is writing the key, as far as the claim knows.
#[derive(Clone, Copy)]
enum Writer {
    /// Not looked at yet (REPEATABLE READ, SERIALIZABLE: looked at before writing).
    Unknown,
    Nobody,
    Other(pg_sys::TransactionId),
}

pub fn claim<'m>(
    keys: &Keys,
    request: &ClaimRequest<'_>,
    now: Micros,
    memory: CallMemory<'m>,
) -> ClaimOutcome<'m> {
    let (tenant, key) = (request.tenant, request.key);
    let per_transaction = snapshot_per_transaction();
    for _ in 0..CLAIM_ROUNDS {
        pgrx::check_for_interrupts!();
        let (seen, writer) = if per_transaction {
            (keys.find(tenant, key, Snap::Transaction), Writer::Unknown)
        } else {
            match keys.find(tenant, key, Snap::Latest) {
                // another transaction's version, not committed: answer from the committed one
                Some(Found {
                    holder: Holder::Inserting(xid),
                    ..
                }) => (
                    keys.find(tenant, key, Snap::Transaction),
                    Writer::Other(xid),
                ),
                Some(found) => {
                    let writer = match found.holder {
                        Holder::Changing(xid) => Writer::Other(xid),
                        _ => Writer::Nobody,
                    };
                    (Some(found), writer)
                }
                None => (None, Writer::Nobody),
            }
        };
        let row = seen.as_ref().map(|f| keys.key_row(f, memory));
        let purgeable = row.as_ref().is_some_and(|r| r.is_purgeable(now));
        let replaced = row.as_ref().map(|r| r.fence);
        let mine = seen.as_ref().is_some_and(|f| f.holder == Holder::Me);
        let attempt = match plan(row, mine, request, now) {
            Plan::Answer(outcome) => return outcome,
            Plan::Claim(attempt) => attempt,
        };
        prevent_if_read_only(if seen.is_some() { c"UPDATE" } else { c"INSERT" });
        let writer = match writer {
            Writer::Unknown => match keys.find(tenant, key, Snap::Latest) {
                Some(Found {
                    holder: Holder::Inserting(xid) | Holder::Changing(xid),
                    ..
                }) => Writer::Other(xid),
                latest if !Found::same_version(latest.as_ref(), seen.as_ref()) => {
                    errors::serialization_failure("idem_claim", tenant, key).raise()
                }
                _ => Writer::Nobody,
            },
            known => known,
        };
        let stored = match writer {
            Writer::Other(xid) => Stored::HeldBy(xid),
            _ => {
                let fence = fences::next(keys.catalog.fence_seq, replaced);
                let write = request.write(now, fence, attempt);
                match write_row(keys, seen.as_ref(), tenant, key, &write) {
                    Stored::Yes(values, nulls) => {
                        let c = &keys.catalog.columns;
                        let column = |column: Column| {
                            let attno = c.of(column);
                            (!nulls[attno - 1]).then(|| values[attno - 1])
                        };
                        let checkpoint = (
                            column(Column::CheckpointPhase)
                                // SAFETY: checkpoint_phase is a text column; the datum lives
                                // with `seen` (kept) or was just built (set).
                                .and_then(|d| unsafe { <&str as FromDatum>::from_datum(d, false) })
                                .map(str::to_owned),
                            column(Column::CheckpointData)
                                // SAFETY: checkpoint_data is a jsonb column; the datum lives
                                // with `seen` (kept) or was just built (set).
                                .map(|d| unsafe { memory.copy_jsonb(d) }),
                        );
                        return request.claimed(now, fence, attempt, checkpoint);
                    }
                    other => other,
                }
            }
        };
        match stored {
            Stored::HeldBy(xid) if purgeable => wait_for(xid),
            Stored::HeldBy(_) => return ClaimOutcome::InProgress(None),
            Stored::Changed => changed_under("idem_claim", tenant, key),
            Stored::Taken | Stored::Yes(..) => {}
        }
    }
    ClaimOutcome::InProgress(None)
}

// ---------------------------------------------------------------------------------------------
// Consumed messages
// ---------------------------------------------------------------------------------------------

/// Records the message `request.key` as processed unless it was (see `rules::consumes::plan_consume`).
/// Another transaction writing the key is waited for, as INSERT ... ON CONFLICT waits for a
/// conflicting insert: only its outcome tells whether the message is new.
pub fn consume(
    keys: &Keys,
    request: &ConsumeRequest<'_>,
    now: Micros,
    memory: CallMemory<'_>,
) -> Result<Consumed, errors::IdemError> {
    let (tenant, key) = (request.tenant, request.key);
    let per_transaction = snapshot_per_transaction();
    loop {
        pgrx::check_for_interrupts!();
        let latest = keys.find(tenant, key, Snap::Latest);
        let (mine, writer) = match latest.as_ref().map(|f| f.holder) {
            Some(Holder::Inserting(xid) | Holder::Changing(xid)) => (false, Some(xid)),
            Some(Holder::Me) => (true, None),
            _ => (false, None),
        };
        if let Some(xid) = writer {
            wait_for(xid);
            continue;
        }
        // a version committed after this transaction's snapshot: at REPEATABLE READ and
        // SERIALIZABLE, a serialization failure, as INSERT ... ON CONFLICT raises
        if per_transaction && latest.is_some() && !mine {
            let seen = keys.find(tenant, key, Snap::Transaction);
            if !Found::same_version(seen.as_ref(), latest.as_ref()) {
                errors::serialization_failure("idem_consume", tenant, key).raise()
            }
        }
        let row = latest.as_ref().map(|f| keys.key_row(f, memory));
        let attempt = match plan_consume(row.as_ref(), mine, request, now) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write(attempt) => attempt,
        };
        prevent_if_read_only(if latest.is_some() {
            c"UPDATE"
        } else {
            c"INSERT"
        });
        let write = request.write(
            now,
            row.as_ref().map_or(0, |r| r.fence),
            attempt,
            keys.message_rows(),
        );
        match write_row(keys, latest.as_ref(), tenant, key, &write) {
            Stored::Yes(..) => {
                return Ok(Consumed::New {
                    takeover: attempt.takeover,
                })
            }
            Stored::HeldBy(xid) => wait_for(xid),
            Stored::Changed => changed_under("idem_consume", tenant, key),
            Stored::Taken => {}
        }
    }
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
    fn remember_written(&self, tenant: &str, key: &str) {
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
    fn own_row(&self, tenant: &str, key: &str) -> Option<Found> {
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

// ---------------------------------------------------------------------------------------------
// Operations under a fence, and forget
// ---------------------------------------------------------------------------------------------

/// The key's row to act on, as the caller's transaction sees it (its own latest version first,
/// where it last wrote it: `own_row`): the first that `acts` accepts, or else, once no other
/// transaction is inserting or changing the key, what the key holds. Such a transaction's
/// outcome decides (a claim that handed out this very fence, a takeover, a forget), so it is
/// waited for and the key looked at again, as UPDATE waits for a row.
fn row_to_act_on<'m>(
    keys: &Keys,
    tenant: &str,
    key: &str,
    memory: CallMemory<'m>,
    acts: impl Fn(Option<&KeyRow<'_>>) -> bool,
) -> Option<(Found, KeyRow<'m>)> {
    let mut own = keys.own_row(tenant, key);
    loop {
        pgrx::check_for_interrupts!();
        let found = own
            .take()
            .or_else(|| keys.find(tenant, key, Snap::Transaction));
        let row = found.map(|f| {
            let row = keys.key_row(&f, memory);
            (f, row)
        });
        if acts(row.as_ref().map(|(_, r)| r)) || !wait_for_writer(keys, tenant, key) {
            return row;
        }
    }
}

/// Finds the row holding the fence and applies `change`; returns the row's new times.
pub fn fenced(
    keys: &Keys,
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
    memory: CallMemory<'_>,
) -> Result<FencedTimes, Refused> {
    let (tenant, key) = (target.tenant, target.key);
    loop {
        let found = row_to_act_on(keys, tenant, key, memory, |row| target.check(row).is_ok());
        target.check(found.as_ref().map(|(_, row)| row))?;
        let Some((found, row)) = found else {
            errors::internal("a fenced write", "no row holds the fence").raise()
        };
        let (effect, times) = change.effect(&row);
        let written = match effect {
            Effect::Update(write) => {
                let (mut values, mut nulls) = keys.row_after(Some(&found), tenant, key, &write);
                keys.table.update(&found, &mut values, &mut nulls, true)
            }
            Effect::Delete => keys.table.delete(&found, true),
            Effect::Lock => keys.table.lock(&found),
        };
        match written {
            Write::Done => {
                keys.remember_written(tenant, key);
                return Ok(times);
            }
            // a committed transaction changed the row while this one waited: check again
            Write::Changed => changed_under(target.function, tenant, key),
            Write::Busy(_) => errors::internal("a fenced write", "did not wait").raise(),
        }
    }
}

/// Waits for another transaction that inserts or changes the key, if there is one right now;
/// true if it waited. Only the paths that found no row to act on call it, so a transaction never
/// waits for itself: its own writes are visible to it.
fn wait_for_writer(keys: &Keys, tenant: &str, key: &str) -> bool {
    match keys.find(tenant, key, Snap::Latest).map(|f| f.holder) {
        Some(Holder::Inserting(xid) | Holder::Changing(xid)) => {
            wait_for(xid);
            true
        }
        _ => false,
    }
}

/// Drops a key in any state; true if there was one.
pub fn forget(keys: &Keys, tenant: &str, key: &str, memory: CallMemory<'_>) -> bool {
    loop {
        let Some((found, _)) = row_to_act_on(keys, tenant, key, memory, |row| row.is_some()) else {
            return false;
        };
        match keys.table.delete(&found, true) {
            Write::Done => return true,
            Write::Changed => changed_under("idem_forget", tenant, key),
            Write::Busy(_) => errors::internal("forgetting a key", "did not wait").raise(),
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// The decision is made again when idem.keys changes: a column of the DBA's sends every
    /// call to the SPI path, and dropping it brings the engine back, in the same backend.
    #[pg_test]
    fn the_decision_follows_changes_of_idem_keys() {
        assert!(
            matches!(super::open(), super::Opened::Engine(_)),
            "a plain idem.keys takes the engine"
        );
        Spi::run("ALTER TABLE idem.keys ADD COLUMN audited_at timestamptz").unwrap();
        assert!(
            matches!(super::open(), super::Opened::Spi(_)),
            "a column of the DBA's takes the SPI path"
        );
        Spi::run("ALTER TABLE idem.keys DROP COLUMN audited_at").unwrap();
        assert!(
            matches!(super::open(), super::Opened::Engine(_)),
            "and the engine is back once it is dropped"
        );
    }
}
