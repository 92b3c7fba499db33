//! The key store through SQL statements (prepared once per backend, run as the extension's owner:
//! `crate::pg::sql`), where the engine cannot work: Citus must plan every statement on a distributed
//! idem.keys; a hot standby; an idem.keys with triggers or indexes the engine cannot maintain.
//! The purge, which always runs SQL too (FOR UPDATE SKIP LOCKED is what it needs), is
//! `super::purge`.
//!
//! Concurrency: whoever writes a key takes a transaction-scoped lock on the key's identity
//! (`key_lock`) first and keeps it until commit. A claim *tries* it, then reads the key: an
//! answer that needs no write (a replay, a live lease, a mismatch) gives the lock back at once;
//! when the key must be written but another transaction holds the lock (it is claiming or
//! finishing the key right now), the answer is `in_progress`, at once, without waiting. The
//! insert is ON CONFLICT DO NOTHING: a claim on another Citus node, or a backend that took the
//! engine path meanwhile (which takes no key lock), may have inserted the key; then the answer
//! is `in_progress` too. The purge (`super::purge`) takes no key lock and never waits (SKIP LOCKED); it only
//! touches expired rows. A read-only transaction (a hot standby) answers what needs no write
//! and refuses the rest with 25006, as INSERT would, without taking any lock.

use std::cell::RefCell;
use std::collections::HashMap;

use pgrx::datum::{DatumWithOid, Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;

use super::{fences, prevent_if_read_only, read_only};
use crate::enum_list::enum_list;
use crate::errors;
use crate::hashing;
use crate::pg::datum::{CallMemory, Jsonb};
use crate::pg::locks::{Lock, Taken};
use crate::pg::sql::{
    first_row, get_bytes, get_i32, get_i64, get_i8, get_jsonb, get_string, interval_arg, raw,
    timestamptz_arg, Client,
};
use crate::pg::time::{interval_micros, Micros};
use crate::rules::claims::{plan, ClaimOutcome, ClaimRequest, Plan, CLAIM_ROUNDS};
use crate::rules::consumes::{plan_consume, ConsumePlan, ConsumeRequest, Consumed};
use crate::rules::fenced::{Effect, Fenced, FencedChange, FencedTimes, Refused};
use crate::rules::key_row::{state_code, stored_hash, KeyRow, MessageRows, StoredRow};
use crate::rules::row_write::{Assign, Column, RowWrite, Value};

enum_list! {
/// The statements of the store. All names are schema-qualified and all operators are
/// `OPERATOR(pg_catalog.x)`, so neither the caller's search_path nor look-alike objects matter.
#[derive(Clone, Copy)]
enum Stmt {
    Lookup,
    LookupForUpdate,
    Forget,
}
}

const KEY_COLUMNS: &str = "k.state, k.request_hash, k.attempt, k.response_code, k.response_body, \
     k.lease_expires_at, k.expires_at, k.fence, k.ttl, k.purge_after, k.checkpoint_phase, \
     k.checkpoint_data";

const WHERE_KEY: &str = "k.tenant OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2";

impl Stmt {
    fn sql(self) -> String {
        match self {
            Stmt::Lookup => format!("SELECT {KEY_COLUMNS} FROM idem.keys AS k WHERE {WHERE_KEY}"),
            Stmt::LookupForUpdate => format!(
                "SELECT {KEY_COLUMNS} FROM idem.keys AS k WHERE {WHERE_KEY} FOR NO KEY UPDATE OF k"
            ),
            Stmt::Forget => {
                format!("DELETE FROM idem.keys AS k WHERE {WHERE_KEY} RETURNING k.fence")
            }
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

/// The KEY_COLUMNS of a row; None when the key is absent.
fn read_key_row<'m>(table: &SpiTupleTable<'_>, memory: CallMemory<'m>) -> Option<KeyRow<'m>> {
    let state = get_i8(table, 1)?;
    Some(KeyRow::decode(StoredRow {
        state: Some(state),
        request_hash: get_bytes(table, 2).map(|bytes| stored_hash(&bytes)),
        attempt: get_i32(table, 3),
        response_code: get_i32(table, 4),
        response_body: get_jsonb(table, 5, memory),
        lease_expires_at: get_i64(table, 6),
        expires_at: get_i64(table, 7),
        fence: get_i64(table, 8),
        ttl: raw(table, 9).map(interval_micros),
        purge_after: get_i64(table, 10),
        checkpoint: (get_string(table, 11), get_jsonb(table, 12, memory)),
    }))
}

fn lookup<'m>(
    client: &Client<'_, '_>,
    tenant: &str,
    key: &str,
    memory: CallMemory<'m>,
) -> Option<KeyRow<'m>> {
    first_row(run(client, Stmt::Lookup, &[tenant.into(), key.into()]))
        .and_then(|t| read_key_row(&t, memory))
}

/// The key's row locked FOR NO KEY UPDATE (waiting for a transaction changing it).
fn lookup_for_update<'m>(
    client: &Client<'_, '_>,
    tenant: &str,
    key: &str,
    memory: CallMemory<'m>,
) -> Option<KeyRow<'m>> {
    first_row(run(
        client,
        Stmt::LookupForUpdate,
        &[tenant.into(), key.into()],
    ))
    .and_then(|t| read_key_row(&t, memory))
}

// ---------------------------------------------------------------------------------------------
// Writes: the statement that applies a `RowWrite`
// ---------------------------------------------------------------------------------------------

/// The text of the statement that applies a write of `shape` (`RowWrite::shape`) to the key
/// $1/$2, its values from $3 on in `Column` order: an INSERT of a new row (ON CONFLICT DO
/// NOTHING: nothing is returned when another transaction inserted the key) or an UPDATE of the
/// key's row. Either returns a row for the row it wrote: the claim knows the checkpoint it
/// keeps already (`claims::Plan::Claim`), and a rule that does INSTEAD of pg_idem's write must
/// then say what it returns, or the statement fails, rather than report a row never written.
fn write_sql(new_row: bool, write: &RowWrite<'_>) -> String {
    let params = (3..).map(|n| format!("${n}"));
    let returning = "RETURNING true";
    if new_row {
        let columns: Vec<&str> = write.assignments().map(|(c, _)| c.name()).collect();
        let values: Vec<String> = params.take(columns.len()).collect();
        format!(
            "INSERT INTO idem.keys AS k (tenant, key, {}) VALUES ($1, $2, {}) \
             ON CONFLICT (tenant, key) DO NOTHING {returning}",
            columns.join(", "),
            values.join(", ")
        )
    } else {
        let sets: Vec<String> = write
            .assignments()
            .zip(params)
            .map(|((column, assign), param)| match assign {
                Assign::To(_) => format!("{} = {param}", column.name()),
                Assign::AtMost(_) => format!("{0} = LEAST(k.{0}, {param})", column.name()),
            })
            .collect();
        format!(
            "UPDATE idem.keys AS k SET {} WHERE {WHERE_KEY} {returning}",
            sets.join(", ")
        )
    }
}

thread_local! {
    /// The text of each write statement, by (new row, shape), built once per backend.
    static WRITES: RefCell<HashMap<(bool, u64), String>> = RefCell::new(HashMap::new());
}

/// A value of `rules::row_write` as an argument; NULL typed as its column.
fn arg<'a>(column: Column, assign: Assign<'a>) -> DatumWithOid<'a> {
    let value = match assign {
        Assign::AtMost(bound) => return timestamptz_arg(bound),
        Assign::To(value) => value,
    };
    match value {
        Value::Null => match column {
            Column::Fence => DatumWithOid::null::<i64>(),
            Column::Attempt | Column::ResponseCode => DatumWithOid::null::<i32>(),
            Column::State => DatumWithOid::null::<i8>(),
            Column::RequestHash => DatumWithOid::null::<Vec<u8>>(),
            Column::ClaimedAt | Column::LeaseExpiresAt | Column::ExpiresAt | Column::PurgeAfter => {
                DatumWithOid::null::<TimestampWithTimeZone>()
            }
            Column::Ttl => DatumWithOid::null::<Interval>(),
            Column::CheckpointPhase => DatumWithOid::null::<String>(),
            Column::ResponseBody | Column::CheckpointData => DatumWithOid::null::<Jsonb>(),
        },
        Value::Int8(v) => v.into(),
        Value::Int4(v) => v.into(),
        Value::State(state) => state_code(state).into(),
        Value::Hash(hash) => hash.to_vec().into(),
        Value::Time(micros) => timestamptz_arg(micros),
        Value::Duration(micros) => interval_arg(micros),
        Value::Text(text) => text.into(),
        Value::Jsonb(value) => value.into(),
    }
}

/// Applies `write` to the key: inserts its row (`new_row`) or updates it. False when nothing
/// was written (another transaction inserted the key first, or the row was purged meanwhile).
fn apply(
    client: &Client<'_, '_>,
    tenant: &str,
    key: &str,
    new_row: bool,
    write: &RowWrite<'_>,
) -> bool {
    let mut args: Vec<DatumWithOid<'_>> = vec![tenant.into(), key.into()];
    args.extend(
        write
            .assignments()
            .map(|(column, assign)| arg(column, assign)),
    );
    let table = WRITES.with(|texts| {
        let mut texts = texts.borrow_mut();
        let text = texts
            .entry((new_row, write.shape()))
            .or_insert_with(|| write_sql(new_row, write));
        client.run(text, &args)
    });
    !table.is_empty()
}

/// The lock of a key: whoever writes the key on this path takes it first and keeps it until
/// commit (see the module's comment).
fn key_lock(tenant: &str, key: &str) -> Lock {
    Lock::key(hashing::key_lock_id(tenant, key))
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
    memory: CallMemory<'m>,
) -> ClaimOutcome<'m> {
    let (tenant, key) = (request.tenant, request.key);
    if read_only() {
        // a hot standby cannot take the key lock: answer from the row as it is, or refuse
        if let Plan::Answer(outcome) =
            plan(lookup(client, tenant, key, memory), false, request, now)
        {
            return outcome;
        }
        prevent_if_read_only(c"INSERT");
    }
    let lock = key_lock(tenant, key);
    for _ in 0..CLAIM_ROUNDS {
        let taken = lock.try_take();
        let row = lookup(client, tenant, key, memory);
        let mut replaced = row.as_ref().map(|r| r.fence);
        // This transaction holds the key lock: the attempt in progress is its own.
        let mine = taken == Taken::AlreadyHeld;
        let (mut attempt, mut checkpoint) = match plan(row, mine, request, now) {
            // replays, in_progress and mismatch answers only read: give the lock back at once
            Plan::Answer(outcome) => {
                lock.release(taken);
                return outcome;
            }
            // another transaction is claiming or finishing this key right now
            _ if taken == Taken::Busy => return ClaimOutcome::InProgress(None),
            Plan::Claim(attempt, checkpoint) => (attempt, checkpoint),
        };
        if replaced.is_some() {
            // An expired row, or an expired lease. With the key lock held, nobody but a purge
            // batch (or, for a moment after idem.keys changed, a backend on the engine path)
            // can be changing this row: lock it, waiting for that, and decide again on what
            // it left.
            let row = lookup_for_update(client, tenant, key, memory);
            replaced = row.as_ref().map(|r| r.fence);
            (attempt, checkpoint) = match plan(row, mine, request, now) {
                Plan::Answer(outcome) => {
                    lock.release(taken);
                    return outcome;
                }
                Plan::Claim(attempt, checkpoint) => (attempt, checkpoint),
            };
        }
        let fence = fences::next(fence_seq(), replaced);
        let write = request.write(now, fence, attempt);
        if apply(client, tenant, key, replaced.is_none(), &write) {
            return request.claimed(now, fence, attempt, checkpoint);
        }
        lock.release(taken);
        if replaced.is_none() {
            // ON CONFLICT: another node of a Citus cluster, or a backend on the engine path,
            // inserted the key first (at REPEATABLE READ a conflict invisible to the snapshot
            // raises a serialization failure instead)
            break;
        }
        // purged meanwhile: look again
    }
    ClaimOutcome::InProgress(None)
}

// ---------------------------------------------------------------------------------------------
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// Locks the key (the key lock first, then its row FOR NO KEY UPDATE), checks the fence and
/// applies `change`; refused (55000 or P0002) when the fence does not hold the key.
pub fn fenced(
    client: &Client<'_, '_>,
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
    memory: CallMemory<'_>,
) -> Result<FencedTimes, Refused> {
    let (tenant, key) = (target.tenant, target.key);
    key_lock(tenant, key).take();
    let row = lookup_for_update(client, tenant, key, memory);
    target.check(row.as_ref())?;
    let Some(row) = row else {
        errors::internal("a fenced write", "no row holds the fence").raise()
    };
    let (effect, times) = change.effect(&row);
    match effect {
        Effect::Update(write) => {
            apply(client, tenant, key, false, &write);
        }
        Effect::Delete => {
            run(client, Stmt::Forget, &[tenant.into(), key.into()]);
        }
        // locked already
        Effect::Lock => {}
    }
    Ok(times)
}

/// Drops a key in any state; true if there was one.
pub fn forget(client: &Client<'_, '_>, tenant: &str, key: &str) -> bool {
    key_lock(tenant, key).take();
    !run(client, Stmt::Forget, &[tenant.into(), key.into()]).is_empty()
}

// ---------------------------------------------------------------------------------------------
// Consumed messages
// ---------------------------------------------------------------------------------------------

/// Records the message as processed unless it was (see `rules::consumes::plan_consume`). The key lock is
/// waited for (a transaction claiming, finishing or consuming the key holds it until it ends),
/// then the row lock (FOR NO KEY UPDATE): the decision is made on what they left, as INSERT ...
/// ON CONFLICT waits for a conflicting insert. A read-only transaction (a hot standby) answers a
/// processed message and refuses a new one with 25006, without taking any lock.
pub fn consume(
    client: &Client<'_, '_>,
    request: &ConsumeRequest<'_>,
    rows: MessageRows,
    now: Micros,
    memory: CallMemory<'_>,
) -> Result<Consumed, errors::IdemError> {
    let (tenant, key) = (request.tenant, request.key);
    if read_only() {
        match plan_consume(
            lookup(client, tenant, key, memory).as_ref(),
            false,
            request,
            now,
        ) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write(_) => prevent_if_read_only(c"INSERT"),
        }
    }
    let lock = key_lock(tenant, key);
    loop {
        pgrx::check_for_interrupts!();
        // whether this transaction held the key lock before: its own attempt, then
        let mine = lock.try_take() == Taken::AlreadyHeld;
        lock.take();
        let row = lookup_for_update(client, tenant, key, memory);
        let attempt = match plan_consume(row.as_ref(), mine, request, now) {
            ConsumePlan::Answer(answer) => return Ok(answer),
            ConsumePlan::Held(error) => return Err(error),
            ConsumePlan::Write(attempt) => attempt,
        };
        let write = request.write(now, row.as_ref().map_or(0, |r| r.fence), attempt, rows);
        if apply(client, tenant, key, row.is_none(), &write) {
            return Ok(Consumed::New {
                takeover: attempt.takeover,
            });
        }
        // ON CONFLICT: inserted meanwhile by a backend on the engine path (which takes no key
        // lock) or another node; the insert waited for it, so the next round sees its row
    }
}
