//! What the SQL functions that claim a key or act under a fence share, so that each is done
//! once: the claim request built from the arguments (`claim_request`), its outcome counted
//! (`count_outcome`) and shaped into a result row (`ClaimRow`); the checked target of a fenced
//! call (`fenced_target`) and its refusal counted and raised (`under_fence`, `unless_refused`).

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::hashing;
use crate::pg::datum::{self, Jsonb, Record};
use crate::pg::guc;
use crate::pg::time::timestamptz;
use crate::rules::fenced::FencedTimes;
use crate::rules::{ClaimOutcome, ClaimRequest, Fenced, FencedChange, Refused, State};
use crate::sql_api::args::{self, check};
use crate::stats::{self, Event, Tally};
use crate::store;
use crate::tenants;

/// lease and ttl of a claim in microseconds, from the arguments or the settings.
pub fn lease_and_ttl(lease: Option<Interval>, ttl: Option<Interval>) -> (i64, i64) {
    (
        check(args::duration(lease, "lease", guc::lease_timeout_us())),
        check(args::duration(ttl, "ttl", guc::ttl_us())),
    )
}

/// The claim by SQL function `function` of `key` (checked) under `request_hash` (the caller's fingerprint, checked), with
/// lease and ttl from `lease_and_ttl`.
pub fn claim_request<'a>(
    function: &'static str,
    tenant: &'a str,
    key: &'a str,
    request_hash: &str,
    (lease_us, ttl_us): (i64, i64),
) -> ClaimRequest<'a> {
    ClaimRequest {
        function,
        tenant,
        key,
        request_hash: hashing::stored_request_hash(request_hash),
        lease_us,
        ttl_us,
        reject_stale_uuidv7: guc::reject_stale_uuidv7(),
    }
}

/// Counts a claim's outcome (recorded with the call's other events by `Tally::record`).
pub fn count_outcome(tally: &mut Tally, outcome: &ClaimOutcome<'_>) {
    let event = match outcome {
        ClaimOutcome::Claimed { takeover, .. } => {
            if *takeover {
                tally.add(Event::Takeover);
            }
            Event::Claimed
        }
        ClaimOutcome::Replay(row) if row.state == State::Failed => Event::ReplayFailed,
        ClaimOutcome::Replay(_) => Event::ReplayCompleted,
        ClaimOutcome::InProgress(_) => Event::InProgress,
        ClaimOutcome::Mismatch => Event::Mismatch,
        ClaimOutcome::StaleKey => Event::StaleKey,
    };
    tally.add(event);
}

/// The row idem_claim returns (type idem_claim_result), and idem_claim_many after the key; what
/// an outcome does not set is NULL.
#[derive(Default)]
pub struct ClaimRow<'m> {
    pub outcome: &'static str,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    pub response_body: Option<Jsonb<'m>>,
    pub lease_expires_at: Option<TimestampWithTimeZone>,
    pub expires_at: Option<TimestampWithTimeZone>,
    pub checkpoint_phase: Option<String>,
    pub checkpoint_data: Option<Jsonb<'m>>,
}

/// A row of idem_claim_many: the key, then the columns of `ClaimRow` in their SQL order.
pub type ClaimManyRow<'m> = (
    String,
    String,
    Option<i64>,
    Option<i32>,
    Option<i32>,
    Option<Jsonb<'m>>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<Jsonb<'m>>,
);

impl<'m> ClaimRow<'m> {
    pub fn of(outcome: ClaimOutcome<'m>) -> Self {
        match outcome {
            ClaimOutcome::Claimed {
                fence,
                attempt,
                lease_expires_at,
                expires_at,
                checkpoint_phase,
                checkpoint_data,
                ..
            } => ClaimRow {
                outcome: "claimed",
                fence: Some(fence),
                attempt: Some(attempt),
                lease_expires_at: Some(timestamptz(lease_expires_at)),
                expires_at: Some(timestamptz(expires_at)),
                checkpoint_phase,
                checkpoint_data,
                ..Default::default()
            },
            ClaimOutcome::Replay(row) => ClaimRow {
                outcome: if row.state == State::Failed {
                    "failed"
                } else {
                    "completed"
                },
                attempt: Some(row.attempt),
                response_code: row.response_code,
                response_body: row.response_body,
                expires_at: Some(timestamptz(row.expires_at)),
                ..Default::default()
            },
            // never the holder's fence: it would let this caller act in the holder's name
            ClaimOutcome::InProgress(row) => ClaimRow {
                outcome: "in_progress",
                attempt: row.as_ref().map(|r| r.attempt),
                lease_expires_at: row
                    .as_ref()
                    .and_then(|r| r.lease_expires_at.map(timestamptz)),
                expires_at: row.as_ref().map(|r| timestamptz(r.expires_at)),
                ..Default::default()
            },
            ClaimOutcome::Mismatch => ClaimRow {
                outcome: "mismatch",
                ..Default::default()
            },
            ClaimOutcome::StaleKey => ClaimRow {
                outcome: "stale_key",
                ..Default::default()
            },
        }
    }

    /// The row as idem_claim's result, formed against its declared result type.
    pub fn into_record(self, fcinfo: pg_sys::FunctionCallInfo) -> Record {
        datum::record(
            fcinfo,
            &[
                self.outcome.into_datum(),
                self.fence.into_datum(),
                self.attempt.into_datum(),
                self.response_code.into_datum(),
                self.response_body.into_datum(),
                self.lease_expires_at.into_datum(),
                self.expires_at.into_datum(),
                self.checkpoint_phase.into_datum(),
                self.checkpoint_data.into_datum(),
            ],
        )
    }

    /// The row of idem_claim_many for `key`.
    pub fn with_key(self, key: &str) -> ClaimManyRow<'m> {
        (
            key.to_string(),
            self.outcome.to_string(),
            self.fence,
            self.attempt,
            self.response_code,
            self.response_body,
            self.lease_expires_at,
            self.expires_at,
            self.checkpoint_phase,
            self.checkpoint_data,
        )
    }
}

/// The target of a fenced operation: its arguments checked, and the caller's access to the
/// tenant.
pub fn fenced_target<'a>(
    function: &'static str,
    tenant: Option<&'a str>,
    key: Option<&'a str>,
    fence: Option<i64>,
) -> Fenced<'a> {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    let fence = check(args::fence(fence));
    tenants::check_access(tenant);
    Fenced {
        function,
        tenant,
        key,
        fence,
    }
}

/// Applies `change` to the key `target` holds; raises the refusal (counted) if it does not.
pub fn under_fence(target: &Fenced<'_>, change: &FencedChange<'_>) -> FencedTimes {
    unless_refused(target, store::fenced(target, change))
}

/// The result of a fenced operation, or its refusal raised (a stale fence counted first).
pub fn unless_refused<T>(target: &Fenced<'_>, result: Result<T, Refused>) -> T {
    result.unwrap_or_else(|refused| {
        if refused.stale_fence {
            stats::record(target.tenant, Event::StaleFence);
        }
        refused.error.raise()
    })
}
