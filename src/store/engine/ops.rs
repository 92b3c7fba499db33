//! The engine's operations on idem.keys: claim, consume, the operations under a fence, and
//! forget, each a loop of look-ups and writes until its answer holds. Apart from the back-end
//! choice and from the row conversion, which they use.

use pgrx::pg_sys;

use super::rows::{changed_under, write_row, Stored};
use super::Keys;
use crate::errors;
use crate::pg::datum::CallMemory;
use crate::pg::heap::{Found, Holder, Snap, Write};
use crate::pg::time::Micros;
use crate::rules::claims::{plan, ClaimOutcome, ClaimRequest, Plan, CLAIM_ROUNDS};
use crate::rules::consumes::{plan_consume, ConsumePlan, ConsumeRequest, Consumed};
use crate::rules::fenced::{Effect, Fenced, FencedChange, FencedTimes, Refused};
use crate::rules::key_row::KeyRow;
use crate::store::{fences, prevent_if_read_only, snapshot_per_transaction, wait_for};

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
        let (attempt, checkpoint) = match plan(row, mine, request, now) {
            Plan::Answer(outcome) => return outcome,
            Plan::Claim(attempt, checkpoint) => (attempt, checkpoint),
        };
        prevent_if_read_only(if seen.is_some() { c"UPDATE" } else { c"INSERT" });
        let writer = match writer {
            Writer::Unknown => match keys.find(tenant, key, Snap::Latest) {
                Some(Found {
                    holder: Holder::Inserting(xid) | Holder::Changing(xid),
                    ..
                }) => Writer::Other(xid),
                latest if !Found::same_version(latest.as_ref(), seen.as_ref()) => {
                    errors::serialization_failure(request.function, tenant, key).raise()
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
                    Stored::Yes => return request.claimed(now, fence, attempt, checkpoint),
                    other => other,
                }
            }
        };
        match stored {
            Stored::HeldBy(xid) if purgeable => wait_for(xid),
            Stored::HeldBy(_) => return ClaimOutcome::InProgress(None),
            Stored::Changed => changed_under(request.function, tenant, key),
            Stored::Taken | Stored::Yes => {}
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
                errors::serialization_failure(request.function, tenant, key).raise()
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
            Stored::Yes => {
                return Ok(Consumed::New {
                    takeover: attempt.takeover,
                })
            }
            Stored::HeldBy(xid) => wait_for(xid),
            Stored::Changed => changed_under(request.function, tenant, key),
            Stored::Taken => {}
        }
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

/// Drops a key in any state; true if there was one. `function`: the SQL function that asks,
/// named by its errors.
pub fn forget(
    keys: &Keys,
    function: &str,
    tenant: &str,
    key: &str,
    memory: CallMemory<'_>,
) -> bool {
    loop {
        let Some((found, _)) = row_to_act_on(keys, tenant, key, memory, |row| row.is_some()) else {
            return false;
        };
        match keys.table.delete(&found, true) {
            Write::Done => return true,
            Write::Changed => changed_under(function, tenant, key),
            Write::Busy(_) => errors::internal("forgetting a key", "did not wait").raise(),
        }
    }
}
