//! The core SQL API (declared in sql/api.sql): argument checks, defaults from the settings, the
//! key store underneath, and the shape of each result.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::args::{self, check};
use crate::datum::{self, Jsonb, Record};
use crate::hashing;
use crate::stats::{self, Event};
use crate::store::{self, ClaimOutcome, ClaimRequest, Fenced, Micros, State};
use crate::{errors, guc};

pub fn timestamptz(micros: Micros) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(micros)
        .unwrap_or_else(|e| errors::internal("converting a timestamp", format!("{e:?}")).raise())
}

/// The claim columns of idem_claim and idem_claim_many, in their declared order.
pub fn claim_columns(outcome: &ClaimOutcome) -> Vec<datum::Column> {
    use datum::{int4, int8, text, timestamptz as ts};
    let none = || None;
    match outcome {
        ClaimOutcome::Claimed {
            fence,
            attempt,
            lease_expires_at,
            expires_at,
            checkpoint_phase,
            checkpoint_data,
            ..
        } => vec![
            text("claimed"),
            int8(*fence),
            int4(*attempt),
            none(),
            none(),
            ts(*lease_expires_at),
            ts(*expires_at),
            checkpoint_phase.as_deref().and_then(text),
            checkpoint_data.map(Jsonb::datum),
        ],
        ClaimOutcome::Replay(row) => vec![
            text(if row.state == State::Failed {
                "failed"
            } else {
                "completed"
            }),
            none(),
            int4(row.attempt),
            row.response_code.and_then(int4),
            row.response_body.map(Jsonb::datum),
            none(),
            ts(row.expires_at),
            none(),
            none(),
        ],
        ClaimOutcome::InProgress(row) => vec![
            text("in_progress"),
            none(),
            row.as_ref().and_then(|r| int4(r.attempt)),
            none(),
            none(),
            row.as_ref().and_then(|r| r.lease_expires_at).and_then(ts),
            row.as_ref().and_then(|r| ts(r.expires_at)),
            none(),
            none(),
        ],
        ClaimOutcome::Mismatch => [vec![text("mismatch")], vec![None; 8]].concat(),
        ClaimOutcome::StaleKey => [vec![text("stale_key")], vec![None; 8]].concat(),
    }
}

pub fn record_outcome(outcome: &ClaimOutcome) {
    match outcome {
        ClaimOutcome::Claimed { takeover, .. } => {
            stats::record(Event::Claimed);
            if *takeover {
                stats::record(Event::Takeover);
            }
        }
        ClaimOutcome::Replay(row) if row.state == State::Failed => {
            stats::record(Event::ReplayFailed)
        }
        ClaimOutcome::Replay(_) => stats::record(Event::ReplayCompleted),
        ClaimOutcome::InProgress(_) => stats::record(Event::InProgress),
        ClaimOutcome::Mismatch => stats::record(Event::Mismatch),
        ClaimOutcome::StaleKey => stats::record(Event::StaleKey),
    }
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
    let (lease_us, ttl_us) = lease_and_ttl(lease, ttl);
    let request = ClaimRequest {
        tenant,
        key,
        request_hash: hashing::stored_request_hash(request_hash),
        lease_us,
        ttl_us,
        reject_stale_uuidv7: guc::reject_stale_uuidv7(),
    };
    let now = store::clock();
    let outcome = store::with_client(|client| store::claim(client, &request, now));
    record_outcome(&outcome);
    // built after SPI is gone: the row must live in the caller's memory context
    datum::record(fcinfo, &claim_columns(&outcome))
}

/// The target of a fenced operation, checked.
fn fenced<'a>(
    function: &'static str,
    tenant: Option<&'a str>,
    key: Option<&'a str>,
    fence: Option<i64>,
) -> Fenced<'a> {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    let fence = check(args::fence(fence));
    Fenced {
        function,
        tenant,
        key,
        fence,
    }
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
    let now = store::clock();
    let expires_at = store::with_client(|client| {
        store::finish(client, &target, state, response_code, body, now)
    });
    timestamptz(expires_at)
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
    store::with_client(|client| store::release(client, &target));
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
    let lease_expires_at = store::clock().saturating_add(lease_us);
    timestamptz(store::with_client(|client| {
        store::heartbeat(client, &target, lease_expires_at)
    }))
}

#[pg_extern(sql = false)]
fn idem_forget(tenant: Option<&str>, key: Option<&str>) -> bool {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
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
    let now = store::clock();
    store::with_client(|client| store::purge_batch(client, now, max_rows.map(i64::from)))
}

fn json_text_of(body: Option<Jsonb>) -> String {
    body.map(Jsonb::to_text)
        .unwrap_or_else(|| "null".to_string())
}

fn hash_or_raise(result: Result<String, crate::canonical_json::SyntaxError>) -> String {
    result.unwrap_or_else(|e| errors::internal("canonicalizing jsonb", e).raise())
}

#[pg_extern(sql = false)]
fn idem_request_hash_body(body: Option<Jsonb>) -> String {
    hash_or_raise(hashing::request_hash_of_body(&json_text_of(body)))
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
    hash_or_raise(hashing::request_hash_of_request(
        method,
        path,
        &json_text_of(body),
    ))
}

#[pg_extern(sql = false)]
fn idem_new_key() -> pgrx::Uuid {
    pgrx::Uuid::from_bytes(*hashing::new_uuid_v7().as_bytes())
}
