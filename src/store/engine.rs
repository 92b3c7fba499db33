//! The key store without the executor: idem.keys read through its primary key index and written
//! with the heap and index access methods (`crate::heap`), for every hot path (claim, complete,
//! fail, release, heartbeat, checkpoint, assert_fence, forget). Chosen once per backend (again
//! after any change to idem.keys) when idem.keys is a plain heap table `heap::Table` can write
//! exactly as the executor would, and Citus is not installed (Citus must plan every statement
//! on a distributed idem.keys); otherwise the executor path in `store` runs.
//!
//! Concurrency, without a lock held until commit for each key:
//! - A claim reads the key with the transaction's snapshot and decides from that row (replay,
//!   in_progress, mismatch need no write). To write, it tries the key lock, which every engine
//!   claim holds only while it checks and writes the key (microseconds, never across a wait),
//!   then reads the key's latest version, committed or not (SnapshotDirty): another
//!   transaction inserting it, or updating, deleting or locking it, means `in_progress` at once
//!   (a purge of an expired row is waited for instead: it is short and the key is as good as
//!   absent). The insert happens under the key lock, so two claims never both insert; an
//!   update of an existing row never waits (a holder that locks it first wins, and the claim
//!   answers `in_progress`).
//! - Every write leaves the row's xmin or xmax set to the transaction until it ends, which is
//!   how later claims see an attempt in flight, and how a transaction recognizes its own
//!   attempt: a claim never takes over an attempt its own transaction holds.
//! - Fenced operations wait for the row as UPDATE does; when a committed transaction changed
//!   it meanwhile, they read the key again and check the fence again (READ COMMITTED), or fail
//!   with 40001 (REPEATABLE READ, SERIALIZABLE), as the executor's UPDATE would.

use std::cell::{Cell, RefCell};

use pgrx::memcxt::PgMemoryContexts;
use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use super::{
    impossible, not_null, plan, release_if_taken, try_lock_key, ClaimOutcome, ClaimRequest, Fenced,
    KeyLock, KeyRow, Plan, Refused, State, CLAIM_ROUNDS,
};
use crate::datum::Jsonb;
use crate::errors;
use crate::heap::{Found, Holder, PrimaryKey, Snap, Table, Write};
use crate::time::{plus, Micros};

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

/// What this backend knows about idem.keys, until the next invalidation of it. Its indexes are
/// not part of it: they are found on the open table at every call (`Keys::open`), because a
/// REINDEX CONCURRENTLY gives the primary key a new OID and drops the old index, and the
/// invalidation that says so arrives while the table is being opened.
#[derive(Clone, Copy)]
struct Catalog {
    relid: pg_sys::Oid,
    fence_seq: pg_sys::Oid,
    columns: Columns,
}

/// The decision of this backend: None until made, then the engine's catalog data, or None
/// inside for the executor path.
enum Choice {
    Undecided,
    /// `citus`: because Citus is installed (it plans every statement on idem.keys, which may be
    /// distributed, and fences must then order across nodes: see `store::claim`)
    Executor {
        citus: bool,
    },
    Engine(Catalog),
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
    catalog: Catalog,
    primary_key: PrimaryKey,
}

impl Keys {
    /// Opens idem.keys; Err when the engine cannot work on it as it is now (see `Table::open`),
    /// or when it has no valid primary key on (tenant, key) at this moment.
    fn open(catalog: Catalog) -> Result<Keys, &'static str> {
        let table = Table::open(catalog.relid)?;
        let c = catalog.columns;
        let primary_key = table
            .primary_key(&[c.tenant, c.key])
            .ok_or("it has no valid primary key on (tenant, key)")?;
        Ok(Keys {
            table,
            catalog,
            primary_key,
        })
    }
}

/// Opens idem.keys for the engine path, or None when the executor path must run.
pub fn open() -> Option<Keys> {
    // SAFETY: a plain read of shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        // a hot standby: claims only read there, and table_open's RowExclusiveLock is refused
        return None;
    }
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
    let cached = CHOICE.with(|c| match &*c.borrow() {
        Choice::Undecided => None,
        Choice::Executor { .. } => Some(None),
        Choice::Engine(catalog) => Some(Some(*catalog)),
    });
    match cached {
        Some(None) => None,
        // what changed since the decision was made (the invalidation arrives while the table
        // is opened) is decided again
        Some(Some(catalog)) => Keys::open(catalog).ok().or_else(decide),
        None => decide(),
    }
}

/// Whether this backend's key store found Citus installed (valid once `open` ran in this call).
pub fn citus() -> bool {
    CHOICE.with(|c| matches!(*c.borrow(), Choice::Executor { citus: true }))
}

fn decide() -> Option<Keys> {
    let citus = crate::cluster::citus_installed();
    let found = if citus {
        Err("Citus is installed, and must plan every statement on idem.keys")
    } else {
        look_up()
    };
    let (choice, keys) = match found {
        Ok(keys) => (Choice::Engine(keys.catalog), Some(keys)),
        Err(why) => {
            pgrx::debug1!("pg_idem: idem.keys is written through the executor: {why}");
            (Choice::Executor { citus }, None)
        }
    };
    CHOICE.with(|c| *c.borrow_mut() = choice);
    keys
}

fn look_up() -> Result<Keys, &'static str> {
    // SAFETY: a catalog look-up by name; a missing schema gives InvalidOid (missing_ok).
    let namespace = unsafe { pg_sys::get_namespace_oid(c"idem".as_ptr(), true) };
    let relid = oid_by_name(namespace, c"keys");
    let fence_seq = oid_by_name(namespace, c"fence_seq");
    if [relid, fence_seq].contains(&pg_sys::InvalidOid) {
        return Err("idem.keys or idem.fence_seq is missing");
    }
    KEYS_RELID.with(|r| r.set(relid));
    let columns = Columns::resolve(&Table::open(relid)?)?;
    Keys::open(Catalog {
        relid,
        fence_seq,
        columns,
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
        let c = &self.catalog.columns;
        self.table
            .find(self.primary_key, &[(c.tenant, tenant), (c.key, key)], snap)
    }

    fn next_fence(&self) -> i64 {
        super::nextval(self.catalog.fence_seq)
    }

    fn i64_of(&self, found: &Found, attno: usize) -> Option<i64> {
        found.datum(attno).map(|d| d.value() as i64)
    }

    /// The key row a look-up found, its jsonb copied into `outer`.
    fn key_row<'m>(&self, found: &Found, outer: pg_sys::MemoryContext) -> KeyRow<'m> {
        let c = &self.catalog.columns;
        let state = not_null(found.datum(c.state), "state").value() as i8;
        KeyRow {
            state: State::from_code(state)
                .unwrap_or_else(|| impossible(format!("state {:?}", state as u8 as char))),
            request_hash: not_null(
                found
                    .datum(c.request_hash)
                    // SAFETY: request_hash is a bytea column; the value lives with `found`.
                    .and_then(|d| unsafe { <&[u8] as FromDatum>::from_datum(d, false) })
                    .map(<[u8]>::to_vec),
                "request_hash",
            ),
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

fn snapshot_per_transaction() -> bool {
    // SAFETY: reads the current transaction's isolation level, set for the whole transaction.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// The executor refuses writes in a read-only transaction with 25006; so does the engine, with
/// the same message.
fn prevent_if_read_only(command: &std::ffi::CStr) {
    // SAFETY: raises 25006 when the transaction is read-only, otherwise returns.
    unsafe { pg_sys::PreventCommandIfReadOnly(command.as_ptr()) }
}

/// Waits for the transaction `xid` to end (as a row lock wait, interruptible and
/// deadlock-checked).
fn wait_for(xid: pg_sys::TransactionId) {
    // SAFETY: waits on the transaction's lock; no relation context is reported.
    unsafe {
        pg_sys::XactLockTableWait(
            xid,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            pg_sys::XLTW_Oper::XLTW_None,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------

/// A row that only a purge can be acting on: expired, with no live lease.
fn purgeable(row: &KeyRow<'_>, now: Micros) -> bool {
    row.is_expired(now) && !row.lease_is_live(now)
}

pub fn claim<'m>(
    keys: &Keys,
    request: &ClaimRequest<'_>,
    now: Micros,
    outer: pg_sys::MemoryContext,
) -> ClaimOutcome<'m> {
    let (tenant, key) = (request.tenant, request.key);
    for _ in 0..CLAIM_ROUNDS {
        pgrx::check_for_interrupts!();
        let seen = keys.find(tenant, key, Snap::Transaction);
        let row = seen.as_ref().map(|f| keys.key_row(f, outer));
        let was_purgeable = row.as_ref().is_some_and(|r| purgeable(r, now));
        let mine = seen.as_ref().is_some_and(|f| f.holder == Holder::Me);
        let next = match row {
            // This transaction's own attempt (it claimed the key, or proved its fence with a
            // fenced call): however long it has run past its lease or ttl, a takeover would
            // make its own fence stale under its feet.
            Some(row)
                if mine
                    && row.state == State::InProgress
                    && row.request_hash.as_slice() == request.request_hash.as_slice() =>
            {
                return ClaimOutcome::InProgress(Some(row));
            }
            row => match plan(row, request, now) {
                Plan::Fresh if super::is_stale_uuidv7(request, now) => {
                    Plan::Answer(ClaimOutcome::StaleKey)
                }
                next => next,
            },
        };
        let attempt = match next {
            Plan::Answer(outcome) => return outcome,
            Plan::Fresh => 1,
            Plan::TakeOver { attempt } => attempt,
        };
        prevent_if_read_only(if seen.is_some() { c"UPDATE" } else { c"INSERT" });
        let lock = try_lock_key(tenant, key);
        if lock == KeyLock::Busy {
            // another engine claim is writing this key right now
            return ClaimOutcome::InProgress(None);
        }
        let written = write_claim(keys, request, now, seen.as_ref(), attempt, outer);
        release_if_taken(lock, tenant, key);
        match written {
            Claimed::Yes(outcome) => return outcome,
            Claimed::HeldBy(xid) if was_purgeable => wait_for(xid),
            Claimed::HeldBy(_) => return ClaimOutcome::InProgress(None),
            Claimed::Changed if snapshot_per_transaction() => {
                errors::serialization_failure("idem_claim", tenant, key).raise()
            }
            Claimed::Changed => {}
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
}

/// With the key lock held: checks that nobody else is acting on the key and that `seen` is
/// still its latest version, then inserts or takes over the key.
fn write_claim<'m>(
    keys: &Keys,
    request: &ClaimRequest<'_>,
    now: Micros,
    seen: Option<&Found>,
    attempt: i32,
    outer: pg_sys::MemoryContext,
) -> Claimed<'m> {
    let c = keys.catalog.columns;
    let latest = keys.find(request.tenant, request.key, Snap::Latest);
    if let Some(Holder::Inserting(xid) | Holder::Changing(xid)) = latest.as_ref().map(|f| f.holder)
    {
        return Claimed::HeldBy(xid);
    }
    if !Found::same_version(latest.as_ref(), seen) {
        return Claimed::Changed;
    }
    let lease_expires_at = now.saturating_add(request.lease_us);
    let purge_after = now.saturating_add(request.ttl_us);
    let expires_at = purge_after.max(lease_expires_at);
    let ttl = interval(request.ttl_us);
    let request_hash = request
        .request_hash
        .as_slice()
        .into_datum()
        .unwrap_or_else(|| errors::internal("storing a request hash", "NULL").raise());
    let fence = keys.next_fence();
    let natts = keys.table.natts();
    let (mut values, mut nulls) = match seen {
        Some(found) => keys.values_of(found),
        None => (vec![pg_sys::Datum::from(0); natts], vec![true; natts]),
    };
    let (v, n) = (&mut values[..], &mut nulls[..]);
    set(v, n, c.fence, Some(fence.into()));
    set(v, n, c.attempt, Some(attempt.into()));
    set(v, n, c.state, Some(State::InProgress.code().into()));
    set(v, n, c.request_hash, Some(request_hash));
    set(v, n, c.claimed_at, Some(timestamptz(now)));
    set(
        v,
        n,
        c.lease_expires_at,
        Some(timestamptz(lease_expires_at)),
    );
    set(v, n, c.expires_at, Some(timestamptz(expires_at)));
    set(v, n, c.ttl, Some(ttl));
    set(v, n, c.response_code, None);
    set(v, n, c.response_body, None);
    let Some(found) = seen else {
        set(v, n, c.tenant, request.tenant.into_datum());
        set(v, n, c.key, request.key.into_datum());
        set(v, n, c.purge_after, Some(timestamptz(purge_after)));
        set(v, n, c.checkpoint_phase, None);
        set(v, n, c.checkpoint_data, None);
        keys.table.insert(v, n);
        return Claimed::Yes(ClaimOutcome::Claimed {
            fence,
            attempt: 1,
            lease_expires_at,
            expires_at,
            takeover: false,
            checkpoint_phase: None,
            checkpoint_data: None,
        });
    };
    // purge_after only ever moves down here, and to the value it already has in the common
    // case, which keeps the update HOT
    let old_purge_after = not_null(keys.i64_of(found, c.purge_after), "purge_after");
    set(
        v,
        n,
        c.purge_after,
        Some(timestamptz(old_purge_after.min(purge_after))),
    );
    let takeover = attempt > 1;
    if !takeover {
        set(v, n, c.checkpoint_phase, None);
        set(v, n, c.checkpoint_data, None);
    }
    match keys.table.update(found, v, n, false) {
        Write::Done => Claimed::Yes(ClaimOutcome::Claimed {
            fence,
            attempt,
            lease_expires_at,
            expires_at,
            takeover,
            checkpoint_phase: if takeover {
                keys.checkpoint_phase(found)
            } else {
                None
            },
            checkpoint_data: if takeover {
                jsonb(found, c.checkpoint_data, outer)
            } else {
                None
            },
        }),
        Write::Busy(xid) => Claimed::HeldBy(xid),
        Write::Changed => Claimed::Changed,
    }
}

// ---------------------------------------------------------------------------------------------
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// The change a fenced operation makes to the row holding the fence.
pub enum FencedChange<'a> {
    Finish {
        state: State,
        response_code: Option<i32>,
        response_body: Option<Jsonb<'a>>,
        now: Micros,
    },
    Heartbeat {
        lease_expires_at: Micros,
        now: Micros,
    },
    Checkpoint {
        phase: &'a str,
        data: Option<Jsonb<'a>>,
        now: Micros,
    },
    Release,
    AssertFence,
}

/// Finds the row holding the fence and applies `change`; returns the row's new expires_at and
/// lease_expires_at.
pub fn fenced(
    keys: &Keys,
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
    outer: pg_sys::MemoryContext,
) -> Result<(Option<Micros>, Option<Micros>), Refused> {
    let c = keys.catalog.columns;
    // as the executor's UPDATE, DELETE or SELECT FOR NO KEY UPDATE would, whatever the key holds
    prevent_if_read_only(match change {
        FencedChange::Release => c"DELETE",
        FencedChange::AssertFence => c"SELECT FOR NO KEY UPDATE",
        _ => c"UPDATE",
    });
    loop {
        pgrx::check_for_interrupts!();
        let found = keys.find(target.tenant, target.key, Snap::Transaction);
        let row = found.as_ref().map(|f| keys.key_row(f, outer));
        let Some(found) = found.filter(|f| {
            keys.fence_of(f) == target.fence
                && row.as_ref().is_some_and(|r| r.state == State::InProgress)
        }) else {
            // Another transaction may be writing the key right now (a claim that handed out
            // this very fence, a takeover, a forget): its outcome decides, so wait for it and
            // look again, as the executor path does behind the key lock.
            if wait_for_writer(keys, target.tenant, target.key) {
                continue;
            }
            return Err(target.refusal_for(row.as_ref()));
        };
        let (mut values, mut nulls) = keys.values_of(&found);
        let (v, n) = (&mut values[..], &mut nulls[..]);
        let ttl = not_null(found.datum(c.ttl), "ttl");
        let expires_at = not_null(keys.i64_of(&found, c.expires_at), "expires_at");
        let mut result = (Some(expires_at), keys.i64_of(&found, c.lease_expires_at));
        let write = match *change {
            FencedChange::Finish {
                state,
                response_code,
                response_body,
                now,
            } => {
                let new_expiry = plus(now, ttl);
                set(v, n, c.state, Some(state.code().into()));
                set(v, n, c.response_code, response_code.map(Into::into));
                set(
                    v,
                    n,
                    c.response_body,
                    response_body.and_then(IntoDatum::into_datum),
                );
                set(v, n, c.lease_expires_at, None);
                set(v, n, c.expires_at, Some(timestamptz(new_expiry)));
                set(v, n, c.checkpoint_phase, None);
                set(v, n, c.checkpoint_data, None);
                result = (Some(new_expiry), None);
                keys.table.update(&found, v, n, true)
            }
            // a sign of life: the key is kept for its ttl from now on, and never less than its
            // lease
            FencedChange::Heartbeat {
                lease_expires_at,
                now,
            } => {
                let new_expiry = expires_at.max(lease_expires_at).max(plus(now, ttl));
                set(
                    v,
                    n,
                    c.lease_expires_at,
                    Some(timestamptz(lease_expires_at)),
                );
                set(v, n, c.expires_at, Some(timestamptz(new_expiry)));
                result = (Some(new_expiry), Some(lease_expires_at));
                keys.table.update(&found, v, n, true)
            }
            FencedChange::Checkpoint { phase, data, now } => {
                let new_expiry = expires_at.max(plus(now, ttl));
                set(v, n, c.checkpoint_phase, phase.into_datum());
                set(
                    v,
                    n,
                    c.checkpoint_data,
                    data.and_then(IntoDatum::into_datum),
                );
                set(v, n, c.expires_at, Some(timestamptz(new_expiry)));
                result.0 = Some(new_expiry);
                keys.table.update(&found, v, n, true)
            }
            FencedChange::Release => keys.table.delete(&found, true),
            FencedChange::AssertFence => keys.table.lock(&found),
        };
        match write {
            Write::Done => return Ok(result),
            Write::Changed if snapshot_per_transaction() => {
                errors::serialization_failure(target.function, target.tenant, target.key).raise()
            }
            // a committed transaction changed the row while this one waited: check again
            Write::Changed => {}
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
