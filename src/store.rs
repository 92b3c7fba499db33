//! The key store: every read and write of `idem.keys`. Two paths share the claim and fence
//! rules here (`plan`, refusals, the key lock): `engine` (the default, see its doc) works through
//! the table and index access methods; the SPI path below runs plans prepared once per backend,
//! for where the engine cannot (Citus must plan every statement on a distributed idem.keys; a hot
//! standby; an idem.keys with triggers or other indexes). The purge always takes the SPI path.
//!
//! Concurrency rules of the SPI path (the engine's differ where its doc says so):
//! - Whoever writes a key takes a transaction-scoped lock on the key's identity (`key_lock`)
//!   first. A claim *tries* it, then reads the key: an answer that needs no write (a replay, a
//!   live lease, a mismatch) gives the lock back at once; when the key must be written but
//!   another transaction holds the lock (it is claiming or finishing the key right now), the
//!   answer is `in_progress`, at once, without waiting. Holding it guarantees that no other
//!   uncommitted claim, completion or release of the key exists, so the claim's INSERT or
//!   UPDATE cannot wait on another transaction, and (read after taking it) that no other claim
//!   inserted the key since.
//! - The purge takes no key lock and never waits (SKIP LOCKED); it only touches expired rows.
//! - Every time comparison uses the clock value the caller passes in (`now`), read once per call.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::memcxt::PgMemoryContexts;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use pgrx::{FromDatum, IntoDatum, Spi};

use crate::cluster;
use crate::datum::Jsonb;
use crate::enum_list::enum_list;
use crate::errors::{self, LeaseLost};
use crate::hashing;
use crate::time::Micros;

mod engine;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InProgress,
    Completed,
    Failed,
}

impl State {
    pub fn code(self) -> i8 {
        (match self {
            State::InProgress => b'p',
            State::Completed => b'c',
            State::Failed => b'f',
        }) as i8
    }

    fn from_code(code: i8) -> Option<State> {
        match code as u8 {
            b'p' => Some(State::InProgress),
            b'c' => Some(State::Completed),
            b'f' => Some(State::Failed),
            _ => None,
        }
    }
}

/// A key as stored; its jsonb lives in the caller's memory context `'m`.
pub struct KeyRow<'m> {
    pub state: State,
    pub request_hash: Vec<u8>,
    pub attempt: i32,
    pub response_code: Option<i32>,
    pub response_body: Option<Jsonb<'m>>,
    pub lease_expires_at: Option<Micros>,
    pub expires_at: Micros,
}

impl KeyRow<'_> {
    /// Past its expires_at a key counts as absent, purged yet or not.
    pub fn is_expired(&self, now: Micros) -> bool {
        now > self.expires_at
    }

    pub fn lease_is_live(&self, now: Micros) -> bool {
        self.lease_expires_at.is_some_and(|lease| now <= lease)
    }
}

enum_list! {
/// The statements of the store. All names are schema-qualified and all operators are
/// `OPERATOR(pg_catalog.x)`, so neither the caller's search_path nor look-alike objects matter.
#[derive(Clone, Copy)]
enum Stmt {
    Lookup,
    LookupForUpdate,
    Insert,
    InsertOnConflict,
    Reclaim,
    FencedRow,
    Finish,
    Heartbeat,
    Release,
    Checkpoint,
    AssertFence,
    Forget,
    PurgeBatch,
}
}

const KEY_COLUMNS: &str = "k.state, k.request_hash, k.attempt, k.response_code, k.response_body, \
     k.lease_expires_at, k.expires_at, k.checkpoint_phase, k.checkpoint_data";

const WHERE_KEY: &str = "k.tenant OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2";

const WHERE_FENCE: &str = "k.tenant OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2 \
     AND k.fence OPERATOR(pg_catalog.=) $3 AND k.state OPERATOR(pg_catalog.=) 'p'";

/// A row is purgeable once both its expiry and any lease have passed ({t} is the table alias).
fn purgeable(t: &str) -> String {
    format!(
        "{t}.expires_at OPERATOR(pg_catalog.<) $1 \
         AND ({t}.lease_expires_at IS NULL OR {t}.lease_expires_at OPERATOR(pg_catalog.<) $1)"
    )
}

impl Stmt {
    fn sql(self) -> String {
        match self {
            Stmt::Lookup => format!("SELECT {KEY_COLUMNS} FROM idem.keys AS k WHERE {WHERE_KEY}"),
            Stmt::LookupForUpdate => {
                format!("SELECT {KEY_COLUMNS} FROM idem.keys AS k WHERE {WHERE_KEY} FOR NO KEY UPDATE OF k")
            }
            // With the key lock held and the key read after taking it, no other transaction can
            // have inserted it (every inserter holds that lock): at READ COMMITTED a plain INSERT
            // cannot conflict, and skips ON CONFLICT's extra index probe. At REPEATABLE READ the
            // read may predate a committed insert; ON CONFLICT then raises the serialization
            // failure the caller has to retry on.
            Stmt::Insert | Stmt::InsertOnConflict => format!(
                "INSERT INTO idem.keys AS k \
                   (tenant, key, request_hash, fence, attempt, state, claimed_at, lease_expires_at, expires_at, purge_after, ttl) \
                 VALUES ($1, $2, $3, $9, 1, 'p', $4, $5, $6, $7, $8) \
                 {} RETURNING k.fence",
                if matches!(self, Stmt::InsertOnConflict) { "ON CONFLICT (tenant, key) DO NOTHING" } else { "" }
            ),
            // purge_after only ever moves down here, and to the value it already has in the
            // common case, which keeps the update HOT
            Stmt::Reclaim => format!(
                "UPDATE idem.keys AS k SET \
                   fence = GREATEST($11, k.fence OPERATOR(pg_catalog.+) 1), \
                   attempt = $4, state = 'p', request_hash = $3, claimed_at = $5, lease_expires_at = $6, \
                   expires_at = $7, purge_after = LEAST(k.purge_after, $8), ttl = $9, \
                   response_code = NULL, response_body = NULL, \
                   checkpoint_phase = CASE WHEN $10 THEN k.checkpoint_phase END, \
                   checkpoint_data = CASE WHEN $10 THEN k.checkpoint_data END \
                 WHERE {WHERE_KEY} \
                 RETURNING k.fence, k.checkpoint_phase, k.checkpoint_data"
            ),
            // The fenced updates set values computed from this row (read under its lock), never
            // expressions over its columns: Citus refuses `timestamptz + interval` (STABLE) over
            // a column in an UPDATE of a distributed table.
            Stmt::FencedRow => {
                format!("SELECT k.ttl, k.expires_at FROM idem.keys AS k WHERE {WHERE_FENCE} FOR NO KEY UPDATE OF k")
            }
            Stmt::Finish => format!(
                "UPDATE idem.keys AS k SET \
                   state = $4, response_code = $5, response_body = $6, lease_expires_at = NULL, \
                   expires_at = $7, checkpoint_phase = NULL, checkpoint_data = NULL \
                 WHERE {WHERE_FENCE} \
                 RETURNING k.expires_at"
            ),
            Stmt::Heartbeat => format!(
                "UPDATE idem.keys AS k SET lease_expires_at = $4, expires_at = $5 \
                 WHERE {WHERE_FENCE} \
                 RETURNING k.lease_expires_at"
            ),
            Stmt::Release => format!("DELETE FROM idem.keys AS k WHERE {WHERE_FENCE} RETURNING k.fence"),
            Stmt::Checkpoint => format!(
                "UPDATE idem.keys AS k SET checkpoint_phase = $4, checkpoint_data = $5, expires_at = $6 \
                 WHERE {WHERE_FENCE} RETURNING k.fence"
            ),
            Stmt::AssertFence => {
                format!("SELECT k.fence FROM idem.keys AS k WHERE {WHERE_FENCE} FOR NO KEY UPDATE OF k")
            }
            Stmt::Forget => format!("DELETE FROM idem.keys AS k WHERE {WHERE_KEY} RETURNING k.fence"),
            Stmt::PurgeBatch => purge_batch_sql("idem.keys"),
        }
    }
}

// One batch, one walk of the purge_after index: lock the first $2 candidates, delete
// those that are purgeable, and move purge_after up for the others (to a bound of
// their real expiry) so that later batches do not walk over them again. Each side
// checks its condition again on the row it changes.
fn purge_batch_sql(table: &str) -> String {
    format!(
        "WITH batch AS MATERIALIZED ( \
             SELECT c.ctid AS row_id, ({c}) AS purgeable, c.purge_after FROM {table} AS c \
              WHERE c.purge_after OPERATOR(pg_catalog.<) $1 AND c.purge_after OPERATOR(pg_catalog.>=) $3 \
              ORDER BY c.purge_after LIMIT $2 \
                FOR UPDATE SKIP LOCKED), \
         deleted AS ( \
             DELETE FROM {table} AS k \
              WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT b.row_id FROM batch AS b WHERE b.purgeable)) \
                AND {k} \
             RETURNING 1), \
         rearmed AS ( \
             UPDATE {table} AS k \
                SET purge_after = LEAST(k.expires_at, $1 OPERATOR(pg_catalog.+) k.ttl) \
              WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT b.row_id FROM batch AS b WHERE NOT b.purgeable)) \
                AND NOT ({k}) \
             RETURNING 1) \
         SELECT (SELECT pg_catalog.count(*) FROM batch), (SELECT pg_catalog.count(*) FROM deleted), \
                (SELECT pg_catalog.count(*) FROM rearmed), (SELECT pg_catalog.max(b.purge_after) FROM batch AS b)",
        c = purgeable("c"),
        k = purgeable("k"),
    )
}

thread_local! {
    /// Plans prepared in this backend, by statement text; the argument types are those of the
    /// first execution's arguments.
    static PLANS: RefCell<HashMap<String, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

/// Runs a statement through its per-backend plan, preparing it on first use.
fn execute<'c>(spi: &SpiClient<'c>, sql: &str, args: &[DatumWithOid<'_>]) -> SpiTupleTable<'c> {
    let cached = PLANS.with(|plans| plans.borrow().get(sql).cloned());
    let plan = cached.unwrap_or_else(|| {
        let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
        let plan = Rc::new(
            spi.prepare_mut(sql, &types)
                .unwrap_or_else(|e| errors::internal("preparing a statement", e).raise())
                .keep(),
        );
        PLANS.with(|plans| plans.borrow_mut().insert(sql.to_string(), plan.clone()));
        plan
    });
    // `select` leaves the transaction read-only until a statement writes; the plan itself is
    // prepared as mutating, so each execution takes a fresh snapshot (READ COMMITTED)
    spi.select(&*plan, None, args)
        .unwrap_or_else(|e| errors::internal("executing a statement", e).raise())
}

thread_local! {
    /// The text of each store statement, built once per backend.
    static STATEMENTS: [String; Stmt::ALL.len()] = Stmt::ALL.map(Stmt::sql);
}

fn run<'c>(spi: &SpiClient<'c>, stmt: Stmt, args: &[DatumWithOid<'_>]) -> SpiTupleTable<'c> {
    STATEMENTS.with(|texts| execute(spi, &texts[stmt as usize], args))
}

/// The raw datum of a column of the current row, None for NULL.
fn raw(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<pg_sys::Datum> {
    table
        .get_datum_by_ordinal(ordinal)
        .unwrap_or_else(|e| errors::internal("reading a column", e).raise())
}

fn get_i64(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i64> {
    raw(table, ordinal).map(|d| d.value() as i64)
}

fn get_i32(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i32> {
    raw(table, ordinal).map(|d| d.value() as i32)
}

fn get_i8(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<i8> {
    raw(table, ordinal).map(|d| d.value() as i8)
}

fn get_string(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<String> {
    raw(table, ordinal)
        // SAFETY: callers pass the ordinal of a text column; the datum lives as long as the row.
        .and_then(|d| unsafe { <&str as FromDatum>::from_datum(d, false) })
        .map(str::to_owned)
}

fn get_bytes(table: &SpiTupleTable<'_>, ordinal: usize) -> Option<Vec<u8>> {
    raw(table, ordinal)
        // SAFETY: callers pass the ordinal of a bytea column; the datum lives as long as the row.
        .and_then(|d| unsafe { <&[u8] as FromDatum>::from_datum(d, false) })
        .map(<[u8]>::to_vec)
}

/// A jsonb column copied into `outer`, the memory context of the SQL function being called, so
/// that it outlives SPI and is freed with the function's result rather than with the portal;
/// `'m` is that context's lifetime, as the caller's signature ties it.
fn get_jsonb<'m>(
    table: &SpiTupleTable<'_>,
    ordinal: usize,
    outer: pg_sys::MemoryContext,
) -> Option<Jsonb<'m>> {
    // SAFETY: callers pass the ordinal of a jsonb column; it is copied into `outer` before SPI
    // frees the row.
    raw(table, ordinal).and_then(|d| unsafe {
        <Jsonb as FromDatum>::from_datum_in_memory_context(
            PgMemoryContexts::For(outer),
            d,
            false,
            pg_sys::JSONBOID,
        )
    })
}

fn timestamptz_arg<'a>(micros: Micros) -> DatumWithOid<'a> {
    // TimestampTz is an int64 passed by value
    // SAFETY: TimestampTz is an int64 passed by value, so the datum is the value itself.
    unsafe { DatumWithOid::new(micros, pg_sys::TIMESTAMPTZOID) }
}

fn interval_arg<'a>(micros: Micros) -> DatumWithOid<'a> {
    // a pure time interval: adding it never depends on the calendar or the session time zone
    let interval = pgrx::datum::Interval::new(0, 0, micros)
        .unwrap_or_else(|e| errors::internal("building an interval", format!("{e:?}")).raise());
    interval.into()
}

fn jsonb_arg<'a>(value: Option<Jsonb<'_>>) -> DatumWithOid<'a> {
    match value {
        Some(v) => v.into(),
        None => DatumWithOid::null::<Jsonb>(),
    }
}

fn first_row(table: SpiTupleTable<'_>) -> Option<SpiTupleTable<'_>> {
    if table.is_empty() {
        None
    } else {
        Some(table.first())
    }
}

/// idem.keys holds something only a bug (or a hand edit of the table) can put there.
fn impossible(what: String) -> ! {
    errors::internal("reading idem.keys", format!("unexpected {what}")).raise()
}

/// The value of a NOT NULL column.
fn not_null<T>(value: Option<T>, column: &str) -> T {
    value.unwrap_or_else(|| impossible(format!("NULL in column {column}")))
}

/// The KEY_COLUMNS of a row, starting at column `first`; None when the key is absent.
fn read_key_row<'m>(
    table: &SpiTupleTable<'_>,
    first: usize,
    outer: pg_sys::MemoryContext,
) -> Option<KeyRow<'m>> {
    let state = get_i8(table, first)?;
    Some(KeyRow {
        state: State::from_code(state)
            .unwrap_or_else(|| impossible(format!("state {:?}", state as u8 as char))),
        request_hash: not_null(get_bytes(table, first + 1), "request_hash"),
        attempt: not_null(get_i32(table, first + 2), "attempt"),
        response_code: get_i32(table, first + 3),
        response_body: get_jsonb(table, first + 4, outer),
        lease_expires_at: get_i64(table, first + 5),
        expires_at: not_null(get_i64(table, first + 6), "expires_at"),
    })
}

fn lookup<'m>(
    client: &Client<'_, '_>,
    tenant: &str,
    key: &str,
    for_update: bool,
) -> Option<KeyRow<'m>> {
    let stmt = if for_update {
        Stmt::LookupForUpdate
    } else {
        Stmt::Lookup
    };
    first_row(run(client.spi, stmt, &[tenant.into(), key.into()]))
        .and_then(|t| read_key_row(&t, 1, client.outer))
}

// ---------------------------------------------------------------------------------------------
// The key lock: a transaction-scoped advisory lock on (database, SHA-256 prefix of tenant/key).
// It lives in its own advisory space (objsubid KEY_LOCK_SPACE) so it never collides with the
// application's own pg_advisory_lock(bigint) (objsubid 1) or (int, int) (objsubid 2) locks.
// ---------------------------------------------------------------------------------------------

/// objsubid of pg_idem's key locks in pg_locks.
pub const KEY_LOCK_SPACE: u16 = 0x1de;

fn key_lock_tag(tenant: &str, key: &str) -> pg_sys::LOCKTAG {
    let id = hashing::key_lock_id(tenant, key);
    pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set once the backend is connected to a database, before any
        // SQL function can run, and never changes afterwards.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: (id >> 32) as u32,
        locktag_field3: id as u32,
        locktag_field4: KEY_LOCK_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// What trying the key lock gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLock {
    /// Another transaction holds it.
    Busy,
    /// Taken now: it may be given back early if this transaction ends up not writing the key.
    Taken,
    /// This transaction held it already.
    AlreadyHeld,
}

/// Takes the key lock if nobody else holds it, without waiting.
pub fn try_lock_key(tenant: &str, key: &str) -> KeyLock {
    let tag = key_lock_tag(tenant, key);
    // SAFETY: a valid advisory lock tag; dontWait = true never blocks, the lock is released at
    // the end of the transaction (sessionLock = false) or by `release_if_taken`.
    match unsafe { pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as i32, false, true) } {
        pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => KeyLock::Busy,
        pg_sys::LockAcquireResult::LOCKACQUIRE_OK => KeyLock::Taken,
        _ => KeyLock::AlreadyHeld,
    }
}

/// Gives back a key lock taken by `try_lock_key` in this call, before the end of the
/// transaction: a claim that only read the key must not make others' claims wait or answer
/// in_progress.
fn release_if_taken(lock: KeyLock, tenant: &str, key: &str) {
    if lock == KeyLock::Taken {
        let tag = key_lock_tag(tenant, key);
        // SAFETY: releases a lock this call took (KeyLock::Taken), with the same tag and mode.
        unsafe {
            pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as i32, false);
        }
    }
}

/// Takes the key lock, waiting for a transaction that is claiming or finishing the key.
pub fn lock_key(tenant: &str, key: &str) {
    let tag = key_lock_tag(tenant, key);
    // SAFETY: a valid advisory lock tag, held until the end of the transaction; waiting is
    // interruptible and deadlock-checked by the lock manager.
    unsafe {
        pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as i32, false, false);
    }
}

// ---------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------

/// The OID of idem.fence_seq; None if it is missing (a broken installation, or a name that
/// resolves to nothing).
fn fence_seq() -> Option<pg_sys::Oid> {
    // SAFETY: catalog look-ups by NUL-terminated names; missing objects give InvalidOid.
    let oid = unsafe {
        let namespace = pg_sys::get_namespace_oid(c"idem".as_ptr(), true);
        pg_sys::get_relname_relid(c"fence_seq".as_ptr(), namespace)
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The next value of the fence sequence `seq`.
fn nextval(seq: pg_sys::Oid) -> i64 {
    // SAFETY: nextval_oid takes a sequence's OID; it checks the privileges of the current user
    // (the extension owner, inside pg_idem's SECURITY DEFINER functions) and raises if the OID
    // is not a sequence.
    unsafe { pgrx::direct_function_call::<i64>(pg_sys::nextval_oid, &[seq.into_datum()]) }
        .unwrap_or_else(|| errors::internal("drawing a fence", "NULL result").raise())
}

pub struct ClaimRequest<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub request_hash: [u8; hashing::STORED_HASH_BYTES],
    pub lease_us: i64,
    pub ttl_us: i64,
    pub reject_stale_uuidv7: bool,
}

pub enum ClaimOutcome<'m> {
    /// The caller owns the key now.
    Claimed {
        fence: i64,
        attempt: i32,
        lease_expires_at: Micros,
        expires_at: Micros,
        takeover: bool,
        checkpoint_phase: Option<String>,
        checkpoint_data: Option<Jsonb<'m>>,
    },
    /// An earlier attempt stored a completion or a final error.
    Replay(KeyRow<'m>),
    /// Another attempt holds the key; the row when it is visible to the caller.
    InProgress(Option<KeyRow<'m>>),
    /// The key exists under another request hash.
    Mismatch,
    /// An absent UUIDv7 key older than its ttl (pg_idem.reject_stale_uuidv7).
    StaleKey,
}

/// What a claim has to do about the row it found.
enum Plan<'m> {
    Answer(ClaimOutcome<'m>),
    /// No live row: claim the key afresh (attempt 1), in place of an expired row if there is one.
    Fresh,
    /// A committed attempt's lease has passed: take over with the next attempt number.
    TakeOver {
        attempt: i32,
    },
}

fn plan<'m>(row: Option<KeyRow<'m>>, request: &ClaimRequest<'_>, now: Micros) -> Plan<'m> {
    let row = match row {
        Some(row) if !row.is_expired(now) => row,
        _ => return Plan::Fresh,
    };
    if row.request_hash.as_slice() != request.request_hash.as_slice() {
        return Plan::Answer(ClaimOutcome::Mismatch);
    }
    match row.state {
        State::Completed | State::Failed => Plan::Answer(ClaimOutcome::Replay(row)),
        State::InProgress if row.lease_is_live(now) => {
            Plan::Answer(ClaimOutcome::InProgress(Some(row)))
        }
        State::InProgress => Plan::TakeOver {
            attempt: row.attempt.saturating_add(1),
        },
    }
}

fn is_stale_uuidv7(request: &ClaimRequest<'_>, now: Micros) -> bool {
    if !request.reject_stale_uuidv7 {
        return false;
    }
    match hashing::uuid_v7_unix_ms(request.key) {
        Some(unix_ms) => {
            // TimestampTz counts from 2000-01-01; Unix time from 1970-01-01
            const UNIX_TO_PG_EPOCH_MS: i64 = 946_684_800_000;
            let key_time = (unix_ms as i64 - UNIX_TO_PG_EPOCH_MS).saturating_mul(1000);
            key_time < now.saturating_sub(request.ttl_us)
        }
        None => false,
    }
}

/// How many times a claim re-reads the key when a concurrent commit changed it under its feet.
/// At READ COMMITTED one re-read always settles it; the bound only guards against livelock.
const CLAIM_ROUNDS: usize = 4;

/// Claims `request.key`. Never waits on another transaction that holds the key (see module doc).
pub fn claim<'m>(
    client: &Client<'_, '_>,
    request: &ClaimRequest<'_>,
    now: Micros,
) -> ClaimOutcome<'m> {
    if let Some(keys) = engine::open() {
        return engine::claim(&keys, request, now, client.outer);
    }
    let (tenant, key) = (request.tenant, request.key);
    let lease_expires_at = now.saturating_add(request.lease_us);
    let purge_after = now.saturating_add(request.ttl_us);
    let expires_at = purge_after.max(lease_expires_at);
    let snapshot_per_transaction =
        // SAFETY: reads the current transaction's isolation level, set for the whole transaction.
        unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32;
    // With Citus, a claim runs on the coordinator or, delegated, on the node holding the key;
    // each node has its own fence sequence and its own key locks. Fences must still increase
    // per key: a new fence is at least this node's clock in microseconds (so it exceeds one
    // handed out earlier on any node whose clock agrees, even for a key deleted since), and a
    // takeover's exceeds the fence it replaces. A key lock taken here does not exclude a claim
    // running on another node, so the insert must tolerate a concurrent one (ON CONFLICT).
    let citus = engine::citus();
    let fence_floor = if citus { crate::time::clock() } else { 0 };
    // drawn here, not by nextval() in the statements: Citus refuses a volatile function in an
    // UPDATE of a distributed table
    let draw_fence = || {
        let seq = fence_seq().unwrap_or_else(|| {
            errors::internal("drawing a fence", "idem.fence_seq is missing").raise()
        });
        nextval(seq).max(fence_floor)
    };
    for _ in 0..CLAIM_ROUNDS {
        let lock = try_lock_key(tenant, key);
        let row = lookup(client, tenant, key, false);
        let exists = row.is_some();
        let next = match row {
            // This transaction holds the key lock, so the attempt in progress is its own (it
            // claimed the key, or proved its fence with a fenced call). However long the
            // transaction has run past its lease or ttl, a takeover here would make its own
            // fence stale under its feet.
            Some(row)
                if lock == KeyLock::AlreadyHeld
                    && row.state == State::InProgress
                    && row.request_hash.as_slice() == request.request_hash.as_slice() =>
            {
                Plan::Answer(ClaimOutcome::InProgress(Some(row)))
            }
            row => match plan(row, request, now) {
                Plan::Fresh if is_stale_uuidv7(request, now) => {
                    Plan::Answer(ClaimOutcome::StaleKey)
                }
                next => next,
            },
        };
        if let Plan::Answer(outcome) = next {
            // replays, in_progress and mismatch answers only read: give the lock back at once
            release_if_taken(lock, tenant, key);
            return outcome;
        }
        if lock == KeyLock::Busy {
            // another transaction is claiming or finishing this key right now
            return ClaimOutcome::InProgress(None);
        }
        let attempt = if exists {
            // An expired row, or an expired lease. With the key lock held, nobody but a purge
            // batch can hold this row's lock, and a purge batch is short: re-read the latest
            // committed version under the row lock.
            let current = lookup(client, tenant, key, true);
            let current_exists = current.is_some();
            match plan(current, request, now) {
                Plan::Answer(outcome) => {
                    release_if_taken(lock, tenant, key);
                    return outcome;
                }
                Plan::TakeOver { attempt } if current_exists => Some(attempt),
                Plan::Fresh if current_exists => Some(1),
                // purged between the two reads: insert it
                _ => None,
            }
        } else {
            None
        };
        if let Some(attempt) = attempt {
            let table = run(
                client.spi,
                Stmt::Reclaim,
                &[
                    tenant.into(),
                    key.into(),
                    request.request_hash.to_vec().into(),
                    attempt.into(),
                    timestamptz_arg(now),
                    timestamptz_arg(lease_expires_at),
                    timestamptz_arg(expires_at),
                    timestamptz_arg(purge_after),
                    interval_arg(request.ttl_us),
                    (attempt > 1).into(),
                    draw_fence().into(),
                ],
            );
            if let Some(t) = first_row(table) {
                return ClaimOutcome::Claimed {
                    fence: not_null(get_i64(&t, 1), "fence"),
                    attempt,
                    lease_expires_at,
                    expires_at,
                    takeover: attempt > 1,
                    checkpoint_phase: get_string(&t, 2),
                    checkpoint_data: get_jsonb(&t, 3, client.outer),
                };
            }
        }
        let insert = if snapshot_per_transaction || citus {
            Stmt::InsertOnConflict
        } else {
            Stmt::Insert
        };
        let table = run(
            client.spi,
            insert,
            &[
                tenant.into(),
                key.into(),
                request.request_hash.to_vec().into(),
                timestamptz_arg(now),
                timestamptz_arg(lease_expires_at),
                timestamptz_arg(expires_at),
                timestamptz_arg(purge_after),
                interval_arg(request.ttl_us),
                draw_fence().into(),
            ],
        );
        if let Some(t) = first_row(table) {
            return ClaimOutcome::Claimed {
                fence: not_null(get_i64(&t, 1), "fence"),
                attempt: 1,
                lease_expires_at,
                expires_at,
                takeover: false,
                checkpoint_phase: None,
                checkpoint_data: None,
            };
        }
        // only ON CONFLICT returns no row: at REPEATABLE READ it raises instead; with Citus a
        // claim of the key on another node committed first
        release_if_taken(lock, tenant, key);
    }
    ClaimOutcome::InProgress(None)
}

// ---------------------------------------------------------------------------------------------
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// The key a fenced operation addresses.
pub struct Fenced<'a> {
    pub function: &'static str,
    pub tenant: &'a str,
    pub key: &'a str,
    pub fence: i64,
}

impl Fenced<'_> {
    /// Why a fenced statement matched no row.
    fn refusal(&self, client: &Client<'_, '_>) -> Refused {
        self.refusal_for(lookup(client, self.tenant, self.key, false).as_ref())
    }

    /// Why a fenced operation found no row holding its fence, given the key's row.
    fn refusal_for(&self, row: Option<&KeyRow<'_>>) -> Refused {
        match row {
            None => Refused {
                error: errors::key_not_found(self.function, self.tenant, self.key, self.fence),
                stale_fence: false,
            },
            Some(row) => {
                let why = match row.state {
                    State::Completed => LeaseLost::Completed,
                    State::Failed => LeaseLost::Failed,
                    State::InProgress => LeaseLost::NotHolder,
                };
                Refused {
                    error: errors::lease_lost(
                        self.function,
                        self.tenant,
                        self.key,
                        self.fence,
                        why,
                    ),
                    stale_fence: true,
                }
            }
        }
    }

    /// Locks the row holding the fence (taking the key lock first); refused (55000 or P0002)
    /// when no row holds it.
    fn lock_row(&self, client: &Client<'_, '_>, now: Micros) -> Result<FencedRow, Refused> {
        lock_key(self.tenant, self.key);
        let table = run(
            client.spi,
            Stmt::FencedRow,
            &[self.tenant.into(), self.key.into(), self.fence.into()],
        );
        let row = first_row(table).ok_or_else(|| self.refusal(client))?;
        let ttl = not_null(raw(&row, 1), "ttl");
        Ok(FencedRow {
            kept_from_now: crate::time::plus(now, ttl),
            expires_at: not_null(get_i64(&row, 2), "expires_at"),
        })
    }

    /// Runs a fenced statement under the key lock; refused (55000 or P0002) when it matched
    /// nothing.
    fn run<'c, 'a>(
        &'a self,
        client: &Client<'_, 'c>,
        stmt: Stmt,
        extra: impl IntoIterator<Item = DatumWithOid<'a>>,
    ) -> Result<SpiTupleTable<'c>, Refused> {
        lock_key(self.tenant, self.key);
        let mut args: Vec<DatumWithOid<'a>> =
            vec![self.tenant.into(), self.key.into(), self.fence.into()];
        args.extend(extra);
        let table = run(client.spi, stmt, &args);
        if table.is_empty() {
            return Err(self.refusal(client));
        }
        Ok(table.first())
    }
}

/// What a fenced change needs of the row it changes.
struct FencedRow {
    /// now + the key's ttl: how long a change made now keeps the key
    kept_from_now: Micros,
    expires_at: Micros,
}

/// A fenced operation the key's current state refuses: the error to raise, and whether it was a
/// stale fence (55000) rather than a missing key (P0002), which the caller counts.
pub struct Refused {
    pub error: errors::IdemError,
    pub stale_fence: bool,
}

/// Stores the final outcome (completed or failed) of the attempt holding the fence; returns the
/// new expires_at.
pub fn finish(
    client: &Client<'_, '_>,
    target: &Fenced<'_>,
    state: State,
    response_code: Option<i32>,
    response_body: Option<Jsonb>,
    now: Micros,
) -> Result<Micros, Refused> {
    if let Some(keys) = engine::open() {
        let change = engine::FencedChange::Finish {
            state,
            response_code,
            response_body,
            now,
        };
        return engine::fenced(&keys, target, &change, client.outer)
            .map(|(expires_at, _)| not_null(expires_at, "expires_at"));
    }
    let kept_until = target.lock_row(client, now)?.kept_from_now;
    let code = match response_code {
        Some(c) => c.into(),
        None => DatumWithOid::null::<i32>(),
    };
    let table = target.run(
        client,
        Stmt::Finish,
        [
            state.code().into(),
            code,
            jsonb_arg(response_body),
            timestamptz_arg(kept_until),
        ],
    )?;
    Ok(not_null(get_i64(&table, 1), "expires_at"))
}

/// Extends the lease of the attempt holding the fence; returns the new lease_expires_at.
pub fn heartbeat(
    client: &Client<'_, '_>,
    target: &Fenced<'_>,
    lease_expires_at: Micros,
    now: Micros,
) -> Result<Micros, Refused> {
    if let Some(keys) = engine::open() {
        let change = engine::FencedChange::Heartbeat {
            lease_expires_at,
            now,
        };
        return engine::fenced(&keys, target, &change, client.outer)
            .map(|(_, lease)| not_null(lease, "lease_expires_at"));
    }
    // a sign of life: the key is kept for its ttl from now on, and never less than its lease
    let row = target.lock_row(client, now)?;
    let expires_at = row.expires_at.max(lease_expires_at).max(row.kept_from_now);
    let table = target.run(
        client,
        Stmt::Heartbeat,
        [
            timestamptz_arg(lease_expires_at),
            timestamptz_arg(expires_at),
        ],
    )?;
    Ok(not_null(get_i64(&table, 1), "lease_expires_at"))
}

/// Removes the claim of the attempt holding the fence.
pub fn release(client: &Client<'_, '_>, target: &Fenced<'_>) -> Result<(), Refused> {
    if let Some(keys) = engine::open() {
        return engine::fenced(&keys, target, &engine::FencedChange::Release, client.outer)
            .map(drop);
    }
    target.run(client, Stmt::Release, []).map(drop)
}

/// Records the progress of the attempt holding the fence.
pub fn checkpoint(
    client: &Client<'_, '_>,
    target: &Fenced<'_>,
    phase: &str,
    data: Option<Jsonb>,
    now: Micros,
) -> Result<(), Refused> {
    if let Some(keys) = engine::open() {
        let change = engine::FencedChange::Checkpoint { phase, data, now };
        return engine::fenced(&keys, target, &change, client.outer).map(drop);
    }
    let row = target.lock_row(client, now)?;
    let expires_at = row.expires_at.max(row.kept_from_now);
    target
        .run(
            client,
            Stmt::Checkpoint,
            [phase.into(), jsonb_arg(data), timestamptz_arg(expires_at)],
        )
        .map(drop)
}

/// Locks the key's row until the end of the transaction if the fence still holds it.
pub fn assert_fence(client: &Client<'_, '_>, target: &Fenced<'_>) -> Result<(), Refused> {
    if let Some(keys) = engine::open() {
        return engine::fenced(
            &keys,
            target,
            &engine::FencedChange::AssertFence,
            client.outer,
        )
        .map(drop);
    }
    target.run(client, Stmt::AssertFence, []).map(drop)
}

/// Drops a key in any state; true if there was one.
pub fn forget(client: &Client<'_, '_>, tenant: &str, key: &str) -> bool {
    if let Some(keys) = engine::open() {
        return engine::forget(&keys, tenant, key);
    }
    lock_key(tenant, key);
    !run(client.spi, Stmt::Forget, &[tenant.into(), key.into()]).is_empty()
}

// ---------------------------------------------------------------------------------------------
// Purge: one code path for idem_purge() and the purge worker
// ---------------------------------------------------------------------------------------------

/// What one purge batch did.
pub struct PurgeBatch {
    pub deleted: i64,
    /// where the next batch of the same pass starts
    pub cursor: PurgeCursor,
    /// whether the pass should go on with another batch
    pub more: bool,
}

/// Where a purge pass has got to: which of the tables it walks (`purge_targets`), and where in
/// that table's purge_after index. Batches of one pass continue from there instead of walking
/// again over the index entries of rows they already deleted (which stay in the index until
/// VACUUM, and cannot even be skipped cheaply inside one transaction).
#[derive(Clone, Copy, Debug)]
pub struct PurgeCursor {
    target: usize,
    after: Micros,
}

impl PurgeCursor {
    pub fn start() -> Self {
        // TimestampTz -infinity
        PurgeCursor {
            target: 0,
            after: i64::MIN,
        }
    }
}

/// The tables a purge walks: idem.keys, or, when Citus distributes it, the shards of idem.keys
/// placed on this node (each node purges its own; a shard is a plain table where it lives, so
/// the batch's FOR UPDATE SKIP LOCKED works there as on one server). Shard names come from
/// Citus's shard_name(), quoted by it.
fn purge_targets(client: &Client<'_, '_>) -> Vec<String> {
    if !cluster::keys_are_distributed() {
        return vec!["idem.keys".to_string()];
    }
    const LOCAL_SHARDS: &str = "SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid) \
         FROM pg_catalog.pg_dist_shard AS s \
         JOIN pg_catalog.pg_dist_placement AS p ON p.shardid OPERATOR(pg_catalog.=) s.shardid \
         WHERE s.logicalrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass \
           AND p.groupid OPERATOR(pg_catalog.=) (SELECT g.groupid FROM pg_catalog.pg_dist_local_group AS g) \
         ORDER BY s.shardid";
    let table = execute(client.spi, LOCAL_SHARDS, &[]);
    table
        .map(|row| {
            let name = row
                .get::<String>(1)
                .unwrap_or_else(|e| errors::internal("reading a shard name", e).raise());
            not_null(name, "shard_name")
        })
        .collect()
}

/// One purge batch in the caller's transaction: looks at up to `limit` keys whose purge_after
/// has passed, from `cursor` on, skipping any row another transaction has locked, deletes the
/// purgeable ones and re-arms the rest. The work is bounded by `limit`, however large the
/// backlog.
pub fn purge_batch(
    client: &Client<'_, '_>,
    now: Micros,
    limit: i64,
    cursor: PurgeCursor,
) -> PurgeBatch {
    let targets = purge_targets(client);
    let Some(target) = targets.get(cursor.target) else {
        return PurgeBatch {
            deleted: 0,
            cursor,
            more: false,
        };
    };
    let args = [
        timestamptz_arg(now),
        limit.into(),
        timestamptz_arg(cursor.after),
    ];
    let table = if cursor.target == 0 && target == "idem.keys" {
        first_row(run(client.spi, Stmt::PurgeBatch, &args))
    } else {
        first_row(execute(client.spi, &purge_batch_sql(target), &args))
    };
    let (scanned, deleted, rearmed, last) = match table {
        Some(t) => (
            get_i64(&t, 1).unwrap_or(0),
            get_i64(&t, 2).unwrap_or(0),
            get_i64(&t, 3).unwrap_or(0),
            get_i64(&t, 4),
        ),
        None => (0, 0, 0, None),
    };
    // scanned: candidates the batch looked at (purge_after passed, not locked by anyone else);
    // rearmed: rows whose purge_after it moved forward. A full batch that changed nothing could
    // only repeat itself.
    let this_target_has_more = scanned >= limit && deleted + rearmed > 0;
    let (cursor, more) = if this_target_has_more {
        let after = last.map_or(cursor.after, |last| last.max(cursor.after));
        (PurgeCursor { after, ..cursor }, true)
    } else {
        let next = PurgeCursor {
            target: cursor.target + 1,
            after: i64::MIN,
        };
        (next, next.target < targets.len())
    };
    PurgeBatch {
        deleted,
        cursor,
        more,
    }
}

/// Deletes expired keys in the caller's transaction until `max_rows` are deleted (all when None)
/// or no candidate is left. Returns how many it deleted.
///
/// One statement per table does it all, not batches: inside one transaction the index entries
/// of rows deleted by an earlier batch cannot be marked dead, so every batch would walk again
/// over all of them wherever purge_after values tie (keys claimed in one transaction share their
/// clock): quadratic. A second statement runs only when the first re-armed some of the rows it
/// looked at instead of deleting them, and continues after them.
pub fn purge(client: &Client<'_, '_>, now: Micros, max_rows: Option<i64>) -> i64 {
    let mut deleted = 0;
    let mut cursor = PurgeCursor::start();
    loop {
        let limit = match max_rows {
            Some(max) if max - deleted <= 0 => return deleted,
            Some(max) => max - deleted,
            None => i64::MAX,
        };
        let batch = purge_batch(client, now, limit, cursor);
        deleted += batch.deleted;
        cursor = batch.cursor;
        if !batch.more {
            return deleted;
        }
    }
}

/// An SPI connection, and the memory context of the SQL function that opened it.
pub struct Client<'a, 'c> {
    spi: &'a SpiClient<'c>,
    outer: pg_sys::MemoryContext,
}

impl Client<'_, '_> {
    /// The first column of the first row of a statement, as bigint; None without rows or for NULL.
    pub fn query_one_i64(&self, sql: &str, args: &[DatumWithOid<'_>]) -> Option<i64> {
        first_row(execute(self.spi, sql, args)).and_then(|t| get_i64(&t, 1))
    }
}

/// Runs `f` with an SPI connection. Values `f` returns that point into PostgreSQL memory (jsonb)
/// live in the caller's memory context.
pub fn with_client<R>(f: impl FnOnce(&Client<'_, '_>) -> R) -> R {
    // SAFETY: reads the current memory context: the SQL function's, before SPI switches it.
    let outer = unsafe { pg_sys::CurrentMemoryContext };
    Spi::connect(|spi| f(&Client { spi, outer }))
}
