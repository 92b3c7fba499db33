//! The key store through SQL statements (prepared once per backend, run as the extension's owner:
//! `crate::pg::sql`), where the engine cannot work: Citus must plan every statement on a distributed
//! idem.keys; a hot standby; an idem.keys with triggers or indexes the engine cannot maintain.
//! The purge always runs here (FOR UPDATE SKIP LOCKED is what it needs).
//!
//! Concurrency: whoever writes a key takes a transaction-scoped lock on the key's identity
//! (`key_lock`) first and keeps it until commit. A claim *tries* it, then reads the key: an
//! answer that needs no write (a replay, a live lease, a mismatch) gives the lock back at once;
//! when the key must be written but another transaction holds the lock (it is claiming or
//! finishing the key right now), the answer is `in_progress`, at once, without waiting. The
//! insert is ON CONFLICT DO NOTHING: a claim on another Citus node, or a backend that took the
//! engine path meanwhile (which takes no key lock), may have inserted the key; then the answer
//! is `in_progress` too. The purge takes no key lock and never waits (SKIP LOCKED); it only
//! touches expired rows. A read-only transaction (a hot standby) answers what needs no write
//! and refuses the rest with 25006, as INSERT would, without taking any lock.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;

use super::{
    fences, not_null, plan, plan_consume, prevent_if_read_only, read_only, stored_hash,
    ClaimOutcome, ClaimRequest, ConsumePlan, ConsumeRequest, Consumed, Fenced, FencedChange,
    KeyRow, Plan, Refused, State, CLAIM_ROUNDS,
};
use crate::enum_list::enum_list;
use crate::errors;
use crate::hashing;
use crate::pg::cluster;
use crate::pg::sql::{
    first_row, get_bytes, get_i32, get_i64, get_i8, get_jsonb, get_string, interval_arg, jsonb_arg,
    optional_i32_arg, raw, timestamptz_arg, Client,
};
use crate::pg::time::Micros;

enum_list! {
/// The statements of the store. All names are schema-qualified and all operators are
/// `OPERATOR(pg_catalog.x)`, so neither the caller's search_path nor look-alike objects matter.
#[derive(Clone, Copy)]
enum Stmt {
    Lookup,
    LookupForUpdate,
    Insert,
    Reclaim,
    FencedRow,
    Finish,
    Heartbeat,
    Release,
    Checkpoint,
    Forget,
    ConsumeInsert,
    ConsumeUpdate,
    PurgeBatch,
}
}

const KEY_COLUMNS: &str = "k.state, k.request_hash, k.attempt, k.response_code, k.response_body, \
     k.lease_expires_at, k.expires_at, k.fence";

const WHERE_KEY: &str = "k.tenant OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2";

const WHERE_FENCE: &str = "k.tenant OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2 \
     AND k.fence OPERATOR(pg_catalog.=) $3 AND k.state OPERATOR(pg_catalog.=) 'p'";

/// A row is purgeable once both its expiry and any lease have passed ({t} is the table alias);
/// `KeyRow::is_purgeable` says the same in Rust.
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
            Stmt::LookupForUpdate => format!(
                "SELECT {KEY_COLUMNS} FROM idem.keys AS k WHERE {WHERE_KEY} FOR NO KEY UPDATE OF k"
            ),
            Stmt::Insert => "INSERT INTO idem.keys AS k \
                   (tenant, key, request_hash, fence, attempt, state, claimed_at, lease_expires_at, expires_at, purge_after, ttl) \
                 VALUES ($1, $2, $3, $9, 1, 'p', $4, $5, $6, $7, $8) \
                 ON CONFLICT (tenant, key) DO NOTHING RETURNING k.fence"
                .to_string(),
            // purge_after only ever moves down here, and to the value it already has in the
            // common case, which keeps the update HOT; the row is locked (FOR NO KEY UPDATE)
            Stmt::Reclaim => format!(
                "UPDATE idem.keys AS k SET \
                   fence = $11, attempt = $4, state = 'p', request_hash = $3, claimed_at = $5, \
                   lease_expires_at = $6, expires_at = $7, purge_after = LEAST(k.purge_after, $8), ttl = $9, \
                   response_code = NULL, response_body = NULL, \
                   checkpoint_phase = CASE WHEN $10 THEN k.checkpoint_phase END, \
                   checkpoint_data = CASE WHEN $10 THEN k.checkpoint_data END \
                 WHERE {WHERE_KEY} \
                 RETURNING k.fence, k.checkpoint_phase, k.checkpoint_data"
            ),
            // The fenced updates set values computed from this row (read under its lock), never
            // expressions over its columns: Citus refuses `timestamptz + interval` (STABLE) over
            // a column in an UPDATE of a distributed table.
            Stmt::FencedRow => format!(
                "SELECT k.ttl, k.expires_at, k.lease_expires_at FROM idem.keys AS k \
                 WHERE {WHERE_FENCE} FOR NO KEY UPDATE OF k"
            ),
            Stmt::Finish => format!(
                "UPDATE idem.keys AS k SET \
                   state = $4, response_code = $5, response_body = $6, lease_expires_at = NULL, \
                   expires_at = $7, checkpoint_phase = NULL, checkpoint_data = NULL \
                 WHERE {WHERE_FENCE}"
            ),
            Stmt::Heartbeat => format!(
                "UPDATE idem.keys AS k SET lease_expires_at = $4, expires_at = $5 WHERE {WHERE_FENCE}"
            ),
            Stmt::Release => format!("DELETE FROM idem.keys AS k WHERE {WHERE_FENCE}"),
            Stmt::Checkpoint => format!(
                "UPDATE idem.keys AS k SET checkpoint_phase = $4, checkpoint_data = $5, expires_at = $6 \
                 WHERE {WHERE_FENCE}"
            ),
            Stmt::Forget => format!("DELETE FROM idem.keys AS k WHERE {WHERE_KEY} RETURNING k.fence"),
            // a consumed message: completed, no fence handed out, no lease, no response
            Stmt::ConsumeInsert => "INSERT INTO idem.keys AS k \
                   (tenant, key, request_hash, fence, attempt, state, claimed_at, lease_expires_at, expires_at, purge_after, ttl) \
                 VALUES ($1, $2, $3, 0, 1, 'c', $4, NULL, $5, $5, $6) \
                 ON CONFLICT (tenant, key) DO NOTHING RETURNING k.attempt"
                .to_string(),
            Stmt::ConsumeUpdate => format!(
                "UPDATE idem.keys AS k SET \
                   attempt = $7, state = 'c', request_hash = $3, claimed_at = $4, lease_expires_at = NULL, \
                   expires_at = $5, purge_after = LEAST(k.purge_after, $5), ttl = $6, \
                   response_code = NULL, response_body = NULL, checkpoint_phase = NULL, checkpoint_data = NULL \
                 WHERE {WHERE_KEY} RETURNING k.attempt"
            ),
            Stmt::PurgeBatch => purge_batch_sql("idem.keys"),
        }
    }
}

thread_local! {
    /// The text of each store statement, built once per backend.
    static STATEMENTS: [String; Stmt::ALL.len()] = Stmt::ALL.map(Stmt::sql);
}

fn run<'c>(client: &Client<'_, 'c>, stmt: Stmt, args: &[DatumWithOid<'_>]) -> SpiTupleTable<'c> {
    STATEMENTS.with(|texts| client.run(&texts[stmt as usize], args))
}

/// The KEY_COLUMNS of a row, and its fence; None when the key is absent.
fn read_key_row<'m>(
    table: &SpiTupleTable<'_>,
    outer: pg_sys::MemoryContext,
) -> Option<(KeyRow<'m>, i64)> {
    let state = get_i8(table, 1)?;
    Some((
        KeyRow {
            state: State::from_code(state),
            request_hash: stored_hash(&not_null(get_bytes(table, 2), "request_hash")),
            attempt: not_null(get_i32(table, 3), "attempt"),
            response_code: get_i32(table, 4),
            response_body: get_jsonb(table, 5, outer),
            lease_expires_at: get_i64(table, 6),
            expires_at: not_null(get_i64(table, 7), "expires_at"),
        },
        not_null(get_i64(table, 8), "fence"),
    ))
}

fn lookup<'m>(client: &Client<'_, '_>, tenant: &str, key: &str) -> Option<(KeyRow<'m>, i64)> {
    first_row(run(client, Stmt::Lookup, &[tenant.into(), key.into()]))
        .and_then(|t| read_key_row(&t, client.outer))
}

/// A looked-up row and its fence, apart.
fn split<'m>(found: Option<(KeyRow<'m>, i64)>) -> (Option<KeyRow<'m>>, Option<i64>) {
    match found {
        Some((row, fence)) => (Some(row), Some(fence)),
        None => (None, None),
    }
}

/// The key's row locked FOR NO KEY UPDATE (waiting for a transaction changing it).
fn lookup_for_update<'m>(
    client: &Client<'_, '_>,
    tenant: &str,
    key: &str,
) -> Option<(KeyRow<'m>, i64)> {
    first_row(run(
        client,
        Stmt::LookupForUpdate,
        &[tenant.into(), key.into()],
    ))
    .and_then(|t| read_key_row(&t, client.outer))
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
enum KeyLock {
    /// Another transaction holds it.
    Busy,
    /// Taken now: it may be given back early if this transaction ends up not writing the key.
    Taken,
    /// This transaction held it already.
    AlreadyHeld,
}

/// Takes the key lock if nobody else holds it, without waiting.
fn try_lock_key(tenant: &str, key: &str) -> KeyLock {
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
fn lock_key(tenant: &str, key: &str) {
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

/// The OID of idem.fence_seq (a broken installation without it is a bug to report).
fn fence_seq() -> pg_sys::Oid {
    // SAFETY: catalog look-ups by NUL-terminated names; missing objects give InvalidOid.
    let oid = unsafe {
        let namespace = pg_sys::get_namespace_oid(c"idem".as_ptr(), true);
        pg_sys::get_relname_relid(c"fence_seq".as_ptr(), namespace)
    };
    if oid == pg_sys::InvalidOid {
        errors::internal("drawing a fence", "idem.fence_seq is missing").raise();
    }
    oid
}

pub fn claim<'m>(
    client: &Client<'_, '_>,
    request: &ClaimRequest<'_>,
    now: Micros,
) -> ClaimOutcome<'m> {
    let (tenant, key) = (request.tenant, request.key);
    if read_only() {
        // a hot standby cannot take the key lock: answer from the row as it is, or refuse
        let row = lookup(client, tenant, key).map(|(row, _)| row);
        if let Plan::Answer(outcome) = plan(row, false, request, now) {
            return outcome;
        }
        prevent_if_read_only(c"INSERT");
    }
    let (lease_expires_at, expires_at, purge_after) = request.times(now);
    for _ in 0..CLAIM_ROUNDS {
        let lock = try_lock_key(tenant, key);
        let (row, mut fence_of_row) = split(lookup(client, tenant, key));
        // This transaction holds the key lock: the attempt in progress is its own.
        let mine = lock == KeyLock::AlreadyHeld;
        let mut attempt = match plan(row, mine, request, now) {
            // replays, in_progress and mismatch answers only read: give the lock back at once
            Plan::Answer(outcome) => {
                release_if_taken(lock, tenant, key);
                return outcome;
            }
            // another transaction is claiming or finishing this key right now
            _ if lock == KeyLock::Busy => return ClaimOutcome::InProgress(None),
            Plan::Fresh => 1,
            Plan::TakeOver { attempt } => attempt,
        };
        if fence_of_row.is_some() {
            // An expired row, or an expired lease. With the key lock held, nobody but a purge
            // batch (or, for a moment after idem.keys changed, a backend on the engine path)
            // can be changing this row: lock it, waiting for that, and decide again on what
            // it left.
            let (row, fence) = split(lookup_for_update(client, tenant, key));
            fence_of_row = fence;
            match plan(row, mine, request, now) {
                Plan::Answer(outcome) => {
                    release_if_taken(lock, tenant, key);
                    return outcome;
                }
                Plan::Fresh => attempt = 1,
                Plan::TakeOver { attempt: a } => attempt = a,
            }
        }
        let fence = fences::next(fence_seq(), fence_of_row.map_or(0, |f| f + 1));
        if fence_of_row.is_some() {
            let table = run(
                client,
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
                    fence.into(),
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
            // purged meanwhile: look again
            release_if_taken(lock, tenant, key);
            continue;
        }
        let table = run(
            client,
            Stmt::Insert,
            &[
                tenant.into(),
                key.into(),
                request.request_hash.to_vec().into(),
                timestamptz_arg(now),
                timestamptz_arg(lease_expires_at),
                timestamptz_arg(expires_at),
                timestamptz_arg(purge_after),
                interval_arg(request.ttl_us),
                fence.into(),
            ],
        );
        if first_row(table).is_some() {
            return ClaimOutcome::Claimed {
                fence,
                attempt: 1,
                lease_expires_at,
                expires_at,
                takeover: false,
                checkpoint_phase: None,
                checkpoint_data: None,
            };
        }
        // ON CONFLICT: another node of a Citus cluster, or a backend on the engine path,
        // inserted the key first (at REPEATABLE READ a conflict invisible to the snapshot
        // raises a serialization failure instead)
        release_if_taken(lock, tenant, key);
        break;
    }
    ClaimOutcome::InProgress(None)
}

// ---------------------------------------------------------------------------------------------
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// Locks the row holding the fence (the key lock first, then FOR NO KEY UPDATE) and applies
/// `change`; refused (55000 or P0002) when no row holds the fence.
pub fn fenced(
    client: &Client<'_, '_>,
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
) -> Result<(Micros, Option<Micros>), Refused> {
    prevent_if_read_only(change.command());
    lock_key(target.tenant, target.key);
    let fenced_args = || -> Vec<DatumWithOid<'_>> {
        vec![target.tenant.into(), target.key.into(), target.fence.into()]
    };
    let Some(row) = first_row(run(client, Stmt::FencedRow, &fenced_args())) else {
        let row = lookup(client, target.tenant, target.key).map(|(row, _)| row);
        return Err(target.refusal_for(row.as_ref()));
    };
    let ttl = not_null(raw(&row, 1), "ttl");
    let (expires_at, lease_expires_at) = change.times(
        not_null(get_i64(&row, 2), "expires_at"),
        get_i64(&row, 3),
        ttl,
    );
    let (stmt, extra): (Stmt, Vec<DatumWithOid<'_>>) = match change {
        FencedChange::Finish {
            state,
            response_code,
            response_body,
            ..
        } => (
            Stmt::Finish,
            vec![
                state.code().into(),
                optional_i32_arg(*response_code),
                jsonb_arg(*response_body),
                timestamptz_arg(expires_at),
            ],
        ),
        FencedChange::Heartbeat {
            lease_expires_at, ..
        } => (
            Stmt::Heartbeat,
            vec![
                timestamptz_arg(*lease_expires_at),
                timestamptz_arg(expires_at),
            ],
        ),
        FencedChange::Checkpoint { phase, data, .. } => (
            Stmt::Checkpoint,
            vec![
                (*phase).into(),
                jsonb_arg(*data),
                timestamptz_arg(expires_at),
            ],
        ),
        FencedChange::Release => (Stmt::Release, vec![]),
        // FencedRow locked it already
        FencedChange::AssertFence => return Ok((expires_at, lease_expires_at)),
    };
    let mut args = fenced_args();
    args.extend(extra);
    run(client, stmt, &args);
    Ok((expires_at, lease_expires_at))
}

/// Drops a key in any state; true if there was one.
pub fn forget(client: &Client<'_, '_>, tenant: &str, key: &str) -> bool {
    prevent_if_read_only(c"DELETE");
    lock_key(tenant, key);
    !run(client, Stmt::Forget, &[tenant.into(), key.into()]).is_empty()
}

// ---------------------------------------------------------------------------------------------
// Consumed messages
// ---------------------------------------------------------------------------------------------

/// Records the message as processed unless it was (see `store::plan_consume`). The key lock is
/// waited for (a transaction claiming, finishing or consuming the key holds it until it ends),
/// then the row lock (FOR NO KEY UPDATE): the decision is made on what they left, as INSERT ...
/// ON CONFLICT waits for a conflicting insert. A read-only transaction (a hot standby) answers a
/// processed message and refuses a new one with 25006, without taking any lock.
pub fn consume(
    client: &Client<'_, '_>,
    request: &ConsumeRequest<'_>,
    now: Micros,
) -> Result<Consumed, errors::IdemError> {
    let (tenant, key) = (request.tenant, request.key);
    if read_only() {
        let row = lookup(client, tenant, key).map(|(row, _)| row);
        match plan_consume(row.as_ref(), false, request, now) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write { .. } => prevent_if_read_only(c"INSERT"),
        }
    }
    let (expires_at, _) = request.times(now);
    let hash = ConsumeRequest::request_hash();
    loop {
        pgrx::check_for_interrupts!();
        // whether this transaction held the key lock before: its own attempt, then
        let mine = try_lock_key(tenant, key) == KeyLock::AlreadyHeld;
        lock_key(tenant, key);
        let (row, fence) = split(lookup_for_update(client, tenant, key));
        let (attempt, takeover) = match plan_consume(row.as_ref(), mine, request, now) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write { attempt, takeover } => (attempt, takeover),
        };
        let args = |stmt_attempt: Option<i32>| -> Vec<DatumWithOid<'_>> {
            let mut args = vec![
                tenant.into(),
                key.into(),
                hash.to_vec().into(),
                timestamptz_arg(now),
                timestamptz_arg(expires_at),
                interval_arg(request.ttl_us),
            ];
            args.extend(stmt_attempt.map(DatumWithOid::from));
            args
        };
        let written = if fence.is_some() {
            run(client, Stmt::ConsumeUpdate, &args(Some(attempt)))
        } else {
            run(client, Stmt::ConsumeInsert, &args(None))
        };
        if first_row(written).is_some() {
            return Ok(Consumed::New { takeover });
        }
        // ON CONFLICT: inserted meanwhile by a backend on the engine path (which takes no key
        // lock) or another node; the insert waited for it, so the next round sees its row
    }
}

// ---------------------------------------------------------------------------------------------
// Purge: one code path for idem_purge() and the purge worker
// ---------------------------------------------------------------------------------------------

// One batch, one walk of the purge_after index: lock the first $2 candidates, delete
// those that are purgeable, and move purge_after up for the others (to a bound of
// their real expiry) so that later batches do not walk over them again. Each side
// checks its condition again on the row it changes.
fn purge_batch_sql(table: &str) -> String {
    format!(
        "WITH batch AS MATERIALIZED ( \
             SELECT c.ctid AS row_id, ({c}) AS purgeable, c.purge_after FROM {table} AS c \
              WHERE c.purge_after OPERATOR(pg_catalog.<) $1 AND c.purge_after OPERATOR(pg_catalog.>=) $3 \
                AND ($4::pg_catalog.text[] IS NULL OR c.tenant OPERATOR(pg_catalog.=) ANY ($4::pg_catalog.text[])) \
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

/// What one purge batch did.
pub struct PurgeBatch {
    pub deleted: i64,
    /// where the next batch of the same pass starts
    pub cursor: PurgeCursor,
    /// whether the pass should go on with another batch
    pub more: bool,
}

/// Where a purge pass has got to: which of the tables it walks (`cluster::local_key_tables`:
/// the shards of idem.keys this node holds, when Citus distributes it), and where in
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

/// Whose expired keys a purge deletes.
#[derive(Clone, Copy, Debug)]
pub enum Tenants<'a> {
    Every,
    /// Only these tenants' (a caller limited by pg_idem.tenant_grants: it locks no other
    /// tenant's rows in its transaction)
    Only(&'a [String]),
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
    tenants: Tenants<'_>,
) -> PurgeBatch {
    let targets = cluster::local_key_tables(client);
    let Some(target) = targets.get(cursor.target) else {
        return PurgeBatch {
            deleted: 0,
            cursor,
            more: false,
        };
    };
    let tenants_arg = match tenants {
        Tenants::Every => DatumWithOid::null::<Vec<String>>(),
        Tenants::Only(tenants) => tenants.to_vec().into(),
    };
    let args = [
        timestamptz_arg(now),
        limit.into(),
        timestamptz_arg(cursor.after),
        tenants_arg,
    ];
    let table = if cursor.target == 0 && target == "idem.keys" {
        first_row(run(client, Stmt::PurgeBatch, &args))
    } else {
        first_row(client.run(&purge_batch_sql(target), &args))
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
pub fn purge(
    client: &Client<'_, '_>,
    now: Micros,
    max_rows: Option<i64>,
    tenants: Tenants<'_>,
) -> i64 {
    let mut deleted = 0;
    let mut cursor = PurgeCursor::start();
    loop {
        let limit = match max_rows {
            Some(max) if max - deleted <= 0 => return deleted,
            Some(max) => max - deleted,
            None => i64::MAX,
        };
        let batch = purge_batch(client, now, limit, cursor, tenants);
        deleted += batch.deleted;
        cursor = batch.cursor;
        if !batch.more {
            return deleted;
        }
    }
}
