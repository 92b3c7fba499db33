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

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pgrx::memcxt::PgMemoryContexts;
use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use super::definition::{self, Verdict};
use super::{
    fences, not_null, plan, plan_consume, prevent_if_read_only, snapshot_per_transaction,
    stored_hash, wait_for, ClaimOutcome, ClaimRequest, ConsumePlan, ConsumeRequest, Consumed,
    Fenced, FencedChange, KeyRow, Plan, Refused, State, CLAIM_ROUNDS,
};
use crate::errors;
use crate::pg::datum::Jsonb;
use crate::pg::heap::{Found, Holder, Inserted, Layout, PrimaryKey, Snap, Table, Write, Written};
use crate::pg::time::Micros;

/// Attribute numbers of idem.keys' columns.
#[derive(Clone, Copy)]
struct Columns {
    fence: usize,
    claimed_at: usize,
    lease_expires_at: usize,
    expires_at: usize,
    purge_after: usize,
    ttl: usize,
    attempt: usize,
    response_code: usize,
    state: usize,
    tenant: usize,
    key: usize,
    request_hash: usize,
    response_body: usize,
    checkpoint_phase: usize,
    checkpoint_data: usize,
}

impl Columns {
    fn resolve(table: &Table) -> Result<Columns, &'static str> {
        let a = |name: &str| table.attno(name).ok_or("a column of idem.keys is missing");
        Ok(Columns {
            fence: a("fence")?,
            claimed_at: a("claimed_at")?,
            lease_expires_at: a("lease_expires_at")?,
            expires_at: a("expires_at")?,
            purge_after: a("purge_after")?,
            ttl: a("ttl")?,
            attempt: a("attempt")?,
            response_code: a("response_code")?,
            state: a("state")?,
            tenant: a("tenant")?,
            key: a("key")?,
            request_hash: a("request_hash")?,
            response_body: a("response_body")?,
            checkpoint_phase: a("checkpoint_phase")?,
            checkpoint_data: a("checkpoint_data")?,
        })
    }
}

/// What this backend knows about idem.keys, until the next invalidation of it or of one of its
/// indexes: its layout (which indexes, their IndexInfo) and which of them is the primary key
/// are found again then, because a REINDEX CONCURRENTLY gives the primary key a new OID and
/// drops the old index, and the invalidation that says so arrives while the table is opened.
struct Catalog {
    fence_seq: pg_sys::Oid,
    columns: Columns,
    layout: Rc<Layout>,
    primary_key: PrimaryKey,
}

/// The decision of this backend, until the next invalidation of idem.keys.
enum Choice {
    Undecided,
    /// The SPI path (`store::spi`); `on_standby`: decided during recovery, so decided again
    /// once this server is promoted.
    Executor {
        on_standby: bool,
    },
    Engine(Rc<Catalog>),
    /// One of pg_idem's own columns was changed: every call is refused (`definition`).
    Refused(String),
}

thread_local! {
    static CHOICE: RefCell<Choice> = const { RefCell::new(Choice::Undecided) };
    static KEYS_RELID: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Forgets the decision when idem.keys (or every relation) is invalidated.
///
/// SAFETY: called by PostgreSQL's invalidation machinery with a relation OID; it only touches
/// this backend's thread-locals.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid == KEYS_RELID.with(Cell::get) {
        CHOICE.with(|c| *c.borrow_mut() = Choice::Undecided);
    }
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

/// Opens idem.keys for the engine path, or None when the executor path must run; raises 55000
/// when one of pg_idem's own columns was changed.
pub fn open() -> Option<Keys> {
    if !CALLBACK_REGISTERED.with(Cell::get) {
        // SAFETY: registers a callback that only resets this backend's cached decision.
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(
                Some(on_relcache_invalidation),
                pg_sys::Datum::from(0),
            )
        };
        CALLBACK_REGISTERED.with(|c| c.set(true));
    }
    // SAFETY: a plain read of shared state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    let cached = CHOICE.with(|c| match &*c.borrow() {
        Choice::Undecided => None,
        Choice::Executor { on_standby } if *on_standby && !standby => None,
        Choice::Executor { .. } => Some(None),
        Choice::Engine(catalog) => Some(Some(catalog.clone())),
        Choice::Refused(difference) => errors::keys_table_changed(difference).raise(),
    });
    match cached {
        Some(None) => None,
        // what changed since the decision was made (the invalidation arrives while the table
        // is opened) is decided again
        Some(Some(catalog)) => match Table::open(&catalog.layout) {
            Ok(table) => Some(Keys { table, catalog }),
            Err(_) => decide(standby),
        },
        None => decide(standby),
    }
}

/// Why the engine does not write idem.keys, or that it does.
enum Decision {
    Engine(Keys),
    Executor(String),
    Refused(String),
}

fn decide(standby: bool) -> Option<Keys> {
    let (choice, keys) = match look_up(standby) {
        Decision::Engine(keys) => (Choice::Engine(keys.catalog.clone()), Some(keys)),
        Decision::Executor(why) => {
            pgrx::debug1!("pg_idem: idem.keys is written through the executor: {why}");
            (
                Choice::Executor {
                    on_standby: standby,
                },
                None,
            )
        }
        Decision::Refused(difference) => {
            CHOICE.with(|c| *c.borrow_mut() = Choice::Refused(difference.clone()));
            errors::keys_table_changed(&difference).raise()
        }
    };
    CHOICE.with(|c| *c.borrow_mut() = choice);
    keys
}

fn look_up(standby: bool) -> Decision {
    // SAFETY: a catalog look-up by name; a missing schema gives InvalidOid (missing_ok).
    let namespace = unsafe { pg_sys::get_namespace_oid(c"idem".as_ptr(), true) };
    let relid = oid_by_name(namespace, c"keys");
    let fence_seq = oid_by_name(namespace, c"fence_seq");
    if [relid, fence_seq].contains(&pg_sys::InvalidOid) {
        return Decision::Executor("idem.keys or idem.fence_seq is missing".into());
    }
    KEYS_RELID.with(|r| r.set(relid));
    // pg_idem's own columns first, whichever path writes: no datum of another type is ever
    // read or written as one of them
    let Some(columns) = crate::pg::heap::columns_of(relid) else {
        return Decision::Executor("it was dropped".into());
    };
    match definition::compare(&columns) {
        Verdict::Changed(difference) => return Decision::Refused(difference),
        Verdict::Extended(_) if standby => {}
        Verdict::Extended(why) => return Decision::Executor(why),
        Verdict::Exact => {}
    }
    if standby {
        // a hot standby: claims only read there, and table_open's RowExclusiveLock is refused
        return Decision::Executor("this server is a hot standby".into());
    }
    if crate::pg::cluster::citus_installed() {
        return Decision::Executor(
            "Citus is installed, and must plan every statement on idem.keys".into(),
        );
    }
    let (layout, table) = match Layout::load(relid) {
        Ok(loaded) => loaded,
        Err(why) => return Decision::Executor(why.into()),
    };
    let columns = match Columns::resolve(&table) {
        Ok(columns) => columns,
        Err(why) => return Decision::Executor(why.into()),
    };
    let Some(primary_key) = layout.primary_key(&table, &[columns.tenant, columns.key]) else {
        return Decision::Executor("it has no valid primary key on (tenant, key)".into());
    };
    Decision::Engine(Keys {
        table,
        catalog: Rc::new(Catalog {
            fence_seq,
            columns,
            layout,
            primary_key,
        }),
    })
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

fn timestamptz(micros: Micros) -> pg_sys::Datum {
    pg_sys::Datum::from(micros)
}

fn interval(micros: i64) -> pg_sys::Datum {
    // a pure time interval: adding it never depends on the calendar or the session time zone
    pgrx::datum::Interval::new(0, 0, micros)
        .ok()
        .and_then(IntoDatum::into_datum)
        .unwrap_or_else(|| errors::internal("building an interval", micros).raise())
}

impl Keys {
    fn find(&self, tenant: &str, key: &str, snap: Snap) -> Option<Found> {
        self.table
            .find(self.catalog.primary_key, &[tenant, key], snap)
    }

    fn i64_of(&self, found: &Found, attno: usize) -> Option<i64> {
        found.datum(attno).map(|d| d.value() as i64)
    }

    /// The key row a look-up found, its jsonb copied into `outer`.
    fn key_row<'m>(&self, found: &Found, outer: pg_sys::MemoryContext) -> KeyRow<'m> {
        let c = &self.catalog.columns;
        KeyRow {
            state: State::from_code(not_null(found.datum(c.state), "state").value() as i8),
            request_hash: stored_hash(not_null(
                found
                    .datum(c.request_hash)
                    // SAFETY: request_hash is a bytea column; the value lives with `found`.
                    .and_then(|d| unsafe { <&[u8] as FromDatum>::from_datum(d, false) }),
                "request_hash",
            )),
            attempt: not_null(found.datum(c.attempt), "attempt").value() as i32,
            response_code: found.datum(c.response_code).map(|d| d.value() as i32),
            response_body: jsonb(found, c.response_body, outer),
            lease_expires_at: self.i64_of(found, c.lease_expires_at),
            expires_at: not_null(self.i64_of(found, c.expires_at), "expires_at"),
        }
    }

    fn checkpoint_phase(&self, found: &Found) -> Option<String> {
        found
            .datum(self.catalog.columns.checkpoint_phase)
            // SAFETY: checkpoint_phase is a text column; the value lives with `found`.
            .and_then(|d| unsafe { <&str as FromDatum>::from_datum(d, false) })
            .map(str::to_owned)
    }

    fn fence_of(&self, found: &Found) -> i64 {
        not_null(self.i64_of(found, self.catalog.columns.fence), "fence")
    }

    /// The values of `found` to modify and write back.
    fn values_of(&self, found: &Found) -> (Vec<pg_sys::Datum>, Vec<bool>) {
        (found.values.clone(), found.nulls.clone())
    }
}

/// A jsonb column copied into `outer`, the memory context of the SQL function being called.
fn jsonb<'m>(found: &Found, attno: usize, outer: pg_sys::MemoryContext) -> Option<Jsonb<'m>> {
    // SAFETY: attno is a jsonb column; the value is detoasted and copied into `outer`, which
    // outlives this call.
    found.datum(attno).and_then(|d| unsafe {
        <Jsonb as FromDatum>::from_datum_in_memory_context(
            PgMemoryContexts::For(outer),
            d,
            false,
            pg_sys::JSONBOID,
        )
    })
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
    outer: pg_sys::MemoryContext,
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
        let row = seen.as_ref().map(|f| keys.key_row(f, outer));
        let purgeable = row.as_ref().is_some_and(|r| r.is_purgeable(now));
        let mine = seen.as_ref().is_some_and(|f| f.holder == Holder::Me);
        let attempt = match plan(row, mine, request, now) {
            Plan::Answer(outcome) => return outcome,
            Plan::Fresh => 1,
            Plan::TakeOver { attempt } => attempt,
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
        let written = match writer {
            Writer::Other(xid) => Claimed::HeldBy(xid),
            _ => write_claim(keys, request, now, seen.as_ref(), attempt, outer),
        };
        match written {
            Claimed::Yes(outcome) => return outcome,
            Claimed::HeldBy(xid) if purgeable => wait_for(xid),
            Claimed::HeldBy(_) => return ClaimOutcome::InProgress(None),
            Claimed::Changed if per_transaction => {
                errors::serialization_failure("idem_claim", tenant, key).raise()
            }
            Claimed::Changed | Claimed::Taken => {}
        }
    }
    ClaimOutcome::InProgress(None)
}

enum Claimed<'m> {
    Yes(ClaimOutcome<'m>),
    /// Another running transaction inserts, changes or locks the key.
    HeldBy(pg_sys::TransactionId),
    /// A transaction committed a change to the key after `seen` was read.
    Changed,
    /// Another transaction inserted the key since it was read: this one's row was taken back.
    Taken,
}

/// Inserts the key, or takes over `seen` (its latest version), for the attempt `attempt`.
fn write_claim<'m>(
    keys: &Keys,
    request: &ClaimRequest<'_>,
    now: Micros,
    seen: Option<&Found>,
    attempt: i32,
    outer: pg_sys::MemoryContext,
) -> Claimed<'m> {
    let (lease_expires_at, expires_at, purge_after) = request.times(now);
    // a fence above every fence handed out before, and above the one it replaces
    let fence = fences::next(
        keys.catalog.fence_seq,
        seen.map_or(0, |f| keys.fence_of(f).saturating_add(1)),
    );
    let takeover = attempt > 1;
    let version = Version {
        tenant: request.tenant,
        key: request.key,
        fence,
        attempt,
        state: State::InProgress,
        request_hash: &request.request_hash,
        now,
        lease_expires_at: Some(lease_expires_at),
        expires_at,
        purge_after,
        ttl_us: request.ttl_us,
        keep_checkpoint: takeover,
    };
    match write_version(keys, seen, &version) {
        Stored::Yes => {
            let c = keys.catalog.columns;
            let (checkpoint_phase, checkpoint_data) = match seen {
                Some(found) if takeover => (
                    keys.checkpoint_phase(found),
                    jsonb(found, c.checkpoint_data, outer),
                ),
                _ => (None, None),
            };
            Claimed::Yes(ClaimOutcome::Claimed {
                fence,
                attempt,
                lease_expires_at,
                expires_at,
                takeover,
                checkpoint_phase,
                checkpoint_data,
            })
        }
        Stored::Taken => Claimed::Taken,
        Stored::HeldBy(xid) => Claimed::HeldBy(xid),
        Stored::Changed => Claimed::Changed,
    }
}

/// A new version of a key's row, as a claim or a consume writes it.
struct Version<'a> {
    tenant: &'a str,
    key: &'a str,
    fence: i64,
    attempt: i32,
    state: State,
    request_hash: &'a [u8],
    now: Micros,
    lease_expires_at: Option<Micros>,
    expires_at: Micros,
    purge_after: Micros,
    ttl_us: i64,
    /// a takeover hands the last checkpoint on; everything else starts without one
    keep_checkpoint: bool,
}

/// What writing a version gave.
enum Stored {
    Yes,
    /// Another transaction inserted the key since it was read: this one's row was taken back.
    Taken,
    /// Another running transaction changes or locks the row.
    HeldBy(pg_sys::TransactionId),
    /// A transaction committed a change to the row after it was read.
    Changed,
}

/// Inserts `version`, or writes it over `seen` (the key's latest version) without waiting;
/// remembers where it went (`OwnRow`).
fn write_version(keys: &Keys, seen: Option<&Found>, version: &Version<'_>) -> Stored {
    let c = keys.catalog.columns;
    let request_hash = version
        .request_hash
        .into_datum()
        .unwrap_or_else(|| errors::internal("storing a request hash", "NULL").raise());
    let natts = keys.table.natts();
    let (mut values, mut nulls) = match seen {
        Some(found) => keys.values_of(found),
        None => (vec![pg_sys::Datum::from(0); natts], vec![true; natts]),
    };
    let (v, n) = (&mut values[..], &mut nulls[..]);
    set(v, n, c.fence, Some(version.fence.into()));
    set(v, n, c.attempt, Some(version.attempt.into()));
    set(v, n, c.state, Some(version.state.code().into()));
    set(v, n, c.request_hash, Some(request_hash));
    set(v, n, c.claimed_at, Some(timestamptz(version.now)));
    set(
        v,
        n,
        c.lease_expires_at,
        version.lease_expires_at.map(timestamptz),
    );
    set(v, n, c.expires_at, Some(timestamptz(version.expires_at)));
    set(v, n, c.ttl, Some(interval(version.ttl_us)));
    set(v, n, c.response_code, None);
    set(v, n, c.response_body, None);
    if !version.keep_checkpoint {
        set(v, n, c.checkpoint_phase, None);
        set(v, n, c.checkpoint_data, None);
    }
    let stored = match seen {
        None => {
            set(v, n, c.tenant, version.tenant.into_datum());
            set(v, n, c.key, version.key.into_datum());
            set(v, n, c.purge_after, Some(timestamptz(version.purge_after)));
            match keys.table.insert(keys.catalog.primary_key, v, n) {
                Inserted::Yes => Stored::Yes,
                Inserted::Taken => Stored::Taken,
            }
        }
        Some(found) => {
            // purge_after only ever moves down here, and to the value it already has in the
            // common case, which keeps the update HOT
            let old_purge_after = not_null(keys.i64_of(found, c.purge_after), "purge_after");
            set(
                v,
                n,
                c.purge_after,
                Some(timestamptz(old_purge_after.min(version.purge_after))),
            );
            match keys.table.update(found, v, n, false) {
                Write::Done => Stored::Yes,
                Write::Busy(xid) => Stored::HeldBy(xid),
                Write::Changed => Stored::Changed,
            }
        }
    };
    if matches!(stored, Stored::Yes) {
        keys.remember_written(version.tenant, version.key);
    }
    stored
}

// ---------------------------------------------------------------------------------------------
// Consumed messages
// ---------------------------------------------------------------------------------------------

/// Records the message `request.key` as processed unless it was (see `store::plan_consume`).
/// Another transaction writing the key is waited for, as INSERT ... ON CONFLICT waits for a
/// conflicting insert: only its outcome tells whether the message is new.
pub fn consume(
    keys: &Keys,
    request: &ConsumeRequest<'_>,
    now: Micros,
    outer: pg_sys::MemoryContext,
) -> Result<Consumed, errors::IdemError> {
    let (tenant, key) = (request.tenant, request.key);
    let per_transaction = snapshot_per_transaction();
    let request_hash = ConsumeRequest::request_hash();
    let (expires_at, purge_after) = request.times(now);
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
        let row = latest.as_ref().map(|f| keys.key_row(f, outer));
        let (attempt, takeover) = match plan_consume(row.as_ref(), mine, request, now) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write { attempt, takeover } => (attempt, takeover),
        };
        prevent_if_read_only(if latest.is_some() {
            c"UPDATE"
        } else {
            c"INSERT"
        });
        let version = Version {
            tenant,
            key,
            // a consumed message holds no fence (none is handed out); a row it replaces keeps
            // its own, so a later claim's fence is still above it
            fence: latest.as_ref().map_or(0, |f| keys.fence_of(f)),
            attempt,
            state: State::Completed,
            request_hash: &request_hash,
            now,
            lease_expires_at: None,
            expires_at,
            purge_after,
            ttl_us: request.ttl_us,
            keep_checkpoint: false,
        };
        match write_version(keys, latest.as_ref(), &version) {
            Stored::Yes => return Ok(Consumed::New { takeover }),
            Stored::HeldBy(xid) => wait_for(xid),
            Stored::Changed if per_transaction => {
                errors::serialization_failure("idem_consume", tenant, key).raise()
            }
            Stored::Taken | Stored::Changed => {}
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
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// Finds the row holding the fence and applies `change`; returns the row's new expires_at and
/// lease_expires_at.
pub fn fenced(
    keys: &Keys,
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
    outer: pg_sys::MemoryContext,
) -> Result<(Micros, Option<Micros>), Refused> {
    let c = keys.catalog.columns;
    // as the executor's UPDATE, DELETE or SELECT FOR NO KEY UPDATE would, whatever the key holds
    prevent_if_read_only(change.command());
    let mut own = keys.own_row(target.tenant, target.key);
    loop {
        pgrx::check_for_interrupts!();
        let found = own
            .take()
            .or_else(|| keys.find(target.tenant, target.key, Snap::Transaction));
        let holds_fence = found.as_ref().is_some_and(|f| {
            keys.fence_of(f) == target.fence
                && not_null(f.datum(c.state), "state").value() as i8 == State::InProgress.code()
        });
        let Some(found) = found.filter(|_| holds_fence) else {
            // Another transaction may be writing the key right now (a claim that handed out
            // this very fence, a takeover, a forget): its outcome decides, so wait for it and
            // look again, as UPDATE waits for a row.
            if wait_for_writer(keys, target.tenant, target.key) {
                continue;
            }
            let row = found_row(keys, target, outer);
            return Err(target.refusal_for(row.as_ref()));
        };
        let ttl = not_null(found.datum(c.ttl), "ttl");
        let (expires_at, lease_expires_at) = change.times(
            not_null(keys.i64_of(&found, c.expires_at), "expires_at"),
            keys.i64_of(&found, c.lease_expires_at),
            ttl,
        );
        let (mut values, mut nulls) = keys.values_of(&found);
        let (v, n) = (&mut values[..], &mut nulls[..]);
        let write = match *change {
            FencedChange::Finish {
                state,
                response_code,
                response_body,
                ..
            } => {
                set(v, n, c.state, Some(state.code().into()));
                set(v, n, c.response_code, response_code.map(Into::into));
                set(
                    v,
                    n,
                    c.response_body,
                    response_body.and_then(IntoDatum::into_datum),
                );
                set(v, n, c.lease_expires_at, None);
                set(v, n, c.expires_at, Some(timestamptz(expires_at)));
                set(v, n, c.checkpoint_phase, None);
                set(v, n, c.checkpoint_data, None);
                keys.table.update(&found, v, n, true)
            }
            FencedChange::Heartbeat { .. } => {
                set(v, n, c.lease_expires_at, lease_expires_at.map(timestamptz));
                set(v, n, c.expires_at, Some(timestamptz(expires_at)));
                keys.table.update(&found, v, n, true)
            }
            FencedChange::Checkpoint { phase, data, .. } => {
                set(v, n, c.checkpoint_phase, phase.into_datum());
                set(
                    v,
                    n,
                    c.checkpoint_data,
                    data.and_then(IntoDatum::into_datum),
                );
                set(v, n, c.expires_at, Some(timestamptz(expires_at)));
                keys.table.update(&found, v, n, true)
            }
            FencedChange::Release => keys.table.delete(&found, true),
            FencedChange::AssertFence => keys.table.lock(&found),
        };
        match write {
            Write::Done => {
                keys.remember_written(target.tenant, target.key);
                return Ok((expires_at, lease_expires_at));
            }
            Write::Changed if snapshot_per_transaction() => {
                errors::serialization_failure(target.function, target.tenant, target.key).raise()
            }
            // a committed transaction changed the row while this one waited: check again
            Write::Changed => {}
            Write::Busy(_) => errors::internal("a fenced write", "did not wait").raise(),
        }
    }
}

/// The key's row as the transaction sees it, for saying why a fence was refused.
fn found_row<'m>(
    keys: &Keys,
    target: &Fenced<'_>,
    outer: pg_sys::MemoryContext,
) -> Option<KeyRow<'m>> {
    keys.find(target.tenant, target.key, Snap::Transaction)
        .map(|f| keys.key_row(&f, outer))
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
pub fn forget(keys: &Keys, tenant: &str, key: &str) -> bool {
    prevent_if_read_only(c"DELETE");
    loop {
        pgrx::check_for_interrupts!();
        let Some(found) = keys.find(tenant, key, Snap::Transaction) else {
            if wait_for_writer(keys, tenant, key) {
                continue;
            }
            return false;
        };
        match keys.table.delete(&found, true) {
            Write::Done => return true,
            Write::Changed if snapshot_per_transaction() => {
                errors::serialization_failure("idem_forget", tenant, key).raise()
            }
            Write::Changed => {}
            Write::Busy(_) => errors::internal("forgetting a key", "did not wait").raise(),
        }
    }
}
