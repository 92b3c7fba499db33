//! The core SQL API (declared in sql/api.sql): argument checks, defaults from the settings, the
//! key store underneath, and the shape of each result.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::args::{self, check};
use crate::canonical_json;
use crate::datum::{self, Jsonb, Record};
use crate::hashing;
use crate::jsonb_walk;
use crate::stats::{self, Event};
use crate::store::{self, ClaimOutcome, ClaimRequest, Fenced, State};
use crate::time::{clock, timestamptz, Micros};
use crate::{errors, guc, tenants};

pub fn record_outcome(tenant: &str, outcome: &ClaimOutcome) {
    let event = match outcome {
        ClaimOutcome::Claimed { takeover, .. } => {
            if *takeover {
                stats::record(tenant, Event::Takeover);
            }
            Event::Claimed
        }
        ClaimOutcome::Replay(row) if row.state == State::Failed => Event::ReplayFailed,
        ClaimOutcome::Replay(_) => Event::ReplayCompleted,
        ClaimOutcome::InProgress(_) => Event::InProgress,
        ClaimOutcome::Mismatch => Event::Mismatch,
        ClaimOutcome::StaleKey => Event::StaleKey,
    };
    stats::record(tenant, event);
}

/// lease and ttl of a claim, from the arguments or the settings.
pub fn lease_and_ttl(lease: Option<Interval>, ttl: Option<Interval>) -> (i64, i64) {
    (
        check(args::duration(lease, "lease", guc::lease_timeout_us())),
        check(args::duration(ttl, "ttl", guc::ttl_us())),
    )
}

#[pg_extern(sql = false)]
fn idem_claim(
    fcinfo: pg_sys::FunctionCallInfo,
    tenant: Option<&str>,
    key: Option<&str>,
    request_hash: Option<&str>,
    lease: Option<Interval>,
    ttl: Option<Interval>,
) -> Record {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    let request_hash = check(args::request_hash(request_hash));
    tenants::check_access(tenant);
    let (lease_us, ttl_us) = lease_and_ttl(lease, ttl);
    let request = ClaimRequest {
        tenant,
        key,
        request_hash: hashing::stored_request_hash(request_hash),
        lease_us,
        ttl_us,
        reject_stale_uuidv7: guc::reject_stale_uuidv7(),
    };
    let now = clock();
    let outcome = store::with_client(|client| store::claim(client, &request, now));
    record_outcome(tenant, &outcome);
    // built after SPI is gone: the row must live in the caller's memory context
    let (_, outcome, fence, attempt, code, body, lease_expires_at, expires_at, phase, data) =
        claim_row(key, outcome);
    datum::record(
        fcinfo,
        &[
            outcome.as_str().into_datum(),
            fence.into_datum(),
            attempt.into_datum(),
            code.into_datum(),
            body.into_datum(),
            lease_expires_at.into_datum(),
            expires_at.into_datum(),
            phase.into_datum(),
            data.into_datum(),
        ],
    )
}

/// The target of a fenced operation, checked.
pub fn fenced<'a>(
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

/// The result of a fenced operation, or its refusal raised (a stale fence counted first).
pub fn unless_refused<T>(target: &Fenced<'_>, result: Result<T, store::Refused>) -> T {
    result.unwrap_or_else(|refused| {
        if refused.stale_fence {
            stats::record(target.tenant, Event::StaleFence);
        }
        refused.error.raise()
    })
}

fn finish(
    function: &'static str,
    state: State,
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    response_code: Option<i32>,
    response_body: Option<Jsonb>,
) -> TimestampWithTimeZone {
    let target = fenced(function, tenant, key, fence);
    let body = check(args::payload(response_body, "response_body"));
    let now = clock();
    let expires_at = store::with_client(|client| {
        store::finish(client, &target, state, response_code, body, now)
    });
    timestamptz(unless_refused(&target, expires_at))
}

#[pg_extern(sql = false)]
fn idem_complete(
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    response_code: Option<i32>,
    response_body: Option<Jsonb>,
) -> TimestampWithTimeZone {
    finish(
        "idem_complete",
        State::Completed,
        tenant,
        key,
        fence,
        response_code,
        response_body,
    )
}

#[pg_extern(sql = false)]
fn idem_fail_final(
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    response_code: Option<i32>,
    response_body: Option<Jsonb>,
) -> TimestampWithTimeZone {
    finish(
        "idem_fail_final",
        State::Failed,
        tenant,
        key,
        fence,
        response_code,
        response_body,
    )
}

#[pg_extern(sql = false)]
fn idem_release(tenant: Option<&str>, key: Option<&str>, fence: Option<i64>) {
    let target = fenced("idem_release", tenant, key, fence);
    unless_refused(
        &target,
        store::with_client(|client| store::release(client, &target)),
    );
}

#[pg_extern(sql = false)]
fn idem_heartbeat(
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    lease: Option<Interval>,
) -> TimestampWithTimeZone {
    let target = fenced("idem_heartbeat", tenant, key, fence);
    let lease_us = check(args::duration(lease, "lease", guc::lease_timeout_us()));
    let now = clock();
    let lease_expires_at = now.saturating_add(lease_us);
    let lease_expires_at =
        store::with_client(|client| store::heartbeat(client, &target, lease_expires_at, now));
    timestamptz(unless_refused(&target, lease_expires_at))
}

#[pg_extern(sql = false)]
fn idem_forget(tenant: Option<&str>, key: Option<&str>) -> bool {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    tenants::check_access(tenant);
    store::with_client(|client| store::forget(client, tenant, key))
}

#[pg_extern(sql = false)]
fn idem_purge(max_rows: Option<i32>) -> i64 {
    if let Some(n) = max_rows {
        if n < 0 {
            errors::invalid_argument(
                "max_rows",
                "must not be negative",
                format!("Got {n}."),
                "Pass how many keys to delete at most, or NULL for all expired keys.",
            )
            .raise();
        }
    }
    let now = clock();
    let deleted = store::with_client(|client| store::purge(client, now, max_rows.map(i64::from)));
    stats::record_purged(deleted);
    deleted
}

/// Hex SHA-256 of the canonical JSON that `write` produces; `body` (SQL NULL is JSON null) is
/// written where `write` calls the function it is given.
fn canonical_hash(
    body: Option<Jsonb>,
    write: impl FnOnce(&mut CanonicalWriter, &dyn Fn(&mut CanonicalWriter)),
) -> String {
    let mut writer = CanonicalWriter::new(hashing::Sha256Sink::new());
    let write_body = |w: &mut CanonicalWriter| match body {
        Some(value) => jsonb_walk::write_canonical(value, w),
        None => w.null(),
    };
    write(&mut writer, &write_body);
    writer.into_sink().finish_hex()
}

type CanonicalWriter = canonical_json::Writer<hashing::Sha256Sink>;

#[pg_extern(sql = false)]
fn idem_request_hash_body(body: Option<Jsonb>) -> String {
    canonical_hash(body, |w, write_body| write_body(w))
}

#[pg_extern(sql = false)]
fn idem_request_hash_request(
    method: Option<&str>,
    path: Option<&str>,
    body: Option<Jsonb>,
) -> String {
    let method = check(args::required(
        method,
        "method",
        "Pass the HTTP method, such as 'POST'.",
    ));
    let path = check(args::required(
        path,
        "path",
        "Pass the request path, such as '/v1/charges'.",
    ));
    // the canonical [METHOD, path, body]
    canonical_hash(body, |w, write_body| {
        w.begin_array();
        w.string_ascii_uppercase(method.as_bytes());
        w.string(path.as_bytes());
        write_body(w);
        w.end_array();
    })
}

#[pg_extern(sql = false)]
fn idem_new_key() -> pgrx::Uuid {
    pgrx::Uuid::from_bytes(*hashing::new_uuid_v7().as_bytes())
}

pub type ClaimRow = (
    String,
    String,
    Option<i64>,
    Option<i32>,
    Option<i32>,
    Option<Jsonb>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<Jsonb>,
);

/// The columns of an idem_claim row; what an outcome does not set stays NULL.
#[derive(Default)]
struct ClaimColumns {
    fence: Option<i64>,
    attempt: Option<i32>,
    response_code: Option<i32>,
    response_body: Option<Jsonb>,
    lease_expires_at: Option<Micros>,
    expires_at: Option<Micros>,
    checkpoint_phase: Option<String>,
    checkpoint_data: Option<Jsonb>,
}

/// One row of idem_claim_many (the key, then the columns of idem_claim); idem_claim uses the
/// columns.
pub fn claim_row(key: &str, outcome: ClaimOutcome) -> ClaimRow {
    let (name, c) = match outcome {
        ClaimOutcome::Claimed {
            fence,
            attempt,
            lease_expires_at,
            expires_at,
            checkpoint_phase,
            checkpoint_data,
            ..
        } => (
            "claimed",
            ClaimColumns {
                fence: Some(fence),
                attempt: Some(attempt),
                lease_expires_at: Some(lease_expires_at),
                expires_at: Some(expires_at),
                checkpoint_phase,
                checkpoint_data,
                ..Default::default()
            },
        ),
        ClaimOutcome::Replay(row) => (
            if row.state == State::Failed {
                "failed"
            } else {
                "completed"
            },
            ClaimColumns {
                attempt: Some(row.attempt),
                response_code: row.response_code,
                response_body: row.response_body,
                expires_at: Some(row.expires_at),
                ..Default::default()
            },
        ),
        // never the holder's fence: it would let this caller act in the holder's name
        ClaimOutcome::InProgress(row) => (
            "in_progress",
            row.map(|r| ClaimColumns {
                attempt: Some(r.attempt),
                lease_expires_at: r.lease_expires_at,
                expires_at: Some(r.expires_at),
                ..Default::default()
            })
            .unwrap_or_default(),
        ),
        ClaimOutcome::Mismatch => ("mismatch", ClaimColumns::default()),
        ClaimOutcome::StaleKey => ("stale_key", ClaimColumns::default()),
    };
    (
        key.to_string(),
        name.to_string(),
        c.fence,
        c.attempt,
        c.response_code,
        c.response_body,
        c.lease_expires_at.map(timestamptz),
        c.expires_at.map(timestamptz),
        c.checkpoint_phase,
        c.checkpoint_data,
    )
}
