//! Beyond single claims (declared in sql/extras.sql): batch claims, checkpoints for multi-step
//! work, a fence guard for business rows, and deterministic keys for downstream calls.

use pgrx::datum::{Array, Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::errors;
use crate::hashing;
use crate::pg::datum::{CallMemory, Jsonb};
use crate::pg::time::clock;
use crate::rules::{ClaimOutcome, ClaimRequest, FencedChange};
use crate::sql_api::args::{self, check};
use crate::sql_api::calls::{
    claim_request, count_outcome, fenced_target, lease_and_ttl, under_fence, ClaimRow,
};
use crate::stats::Tally;
use crate::store;
use crate::tenants;

/// The keys and request hashes of a batch, checked: same length, no NULLs, within the limit.
/// The elements are borrowed from the arrays (PostgreSQL memory), never copied: the count is
/// checked before anything is read.
fn batch<'b, 'a: 'b>(
    keys: Option<&'b Array<'a, &'a str>>,
    hashes: Option<&'b Array<'a, &'a str>>,
) -> Vec<(&'b str, &'b str)> {
    let keys = keys.unwrap_or_else(|| {
        errors::null_argument("keys", "Pass an array of keys, such as ARRAY['k1', 'k2'].").raise()
    });
    let hashes = hashes.unwrap_or_else(|| {
        errors::null_argument(
            "request_hashes",
            "Pass one request hash per key, in the same order.",
        )
        .raise()
    });
    if keys.len() != hashes.len() {
        errors::invalid_argument(
            "request_hashes",
            "must have one element per key",
            format!(
                "keys has {} elements, request_hashes {}.",
                keys.len(),
                hashes.len()
            ),
            "Pass arrays of the same length, the i-th hash for the i-th key.",
        )
        .raise();
    }
    args::check_batch_size(keys.len(), "keys");
    keys.iter()
        .zip(hashes.iter())
        .enumerate()
        .map(|(i, (key, hash))| {
            let key = key.unwrap_or_else(|| {
                errors::null_argument(
                    &format!("keys[{}]", i + 1),
                    "Remove NULL elements from the batch.",
                )
                .raise()
            });
            let hash = hash.unwrap_or_else(|| {
                errors::null_argument(
                    &format!("request_hashes[{}]", i + 1),
                    "Pass a hash for every key ('' to skip the check).",
                )
                .raise()
            });
            (key, hash)
        })
        .collect()
}

#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_claim_many<'a>(
    tenant: Option<&'a str>,
    keys: Option<Array<'a, &'a str>>,
    request_hashes: Option<Array<'a, &'a str>>,
    lease: Option<Interval>,
    ttl: Option<Interval>,
) -> TableIterator<
    'a,
    (
        name!(key, String),
        name!(outcome, String),
        name!(fence, Option<i64>),
        name!(attempt, Option<i32>),
        name!(response_code, Option<i32>),
        name!(response_body, Option<Jsonb<'a>>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(expires_at, Option<TimestampWithTimeZone>),
        name!(checkpoint_phase, Option<String>),
        name!(checkpoint_data, Option<Jsonb<'a>>),
    ),
> {
    let tenant = check(args::name(tenant, "tenant"));
    tenants::check_access(tenant);
    let pairs = batch(keys.as_ref(), request_hashes.as_ref());
    let requests: Vec<ClaimRequest<'_>> = pairs
        .iter()
        .enumerate()
        .map(|(i, (key, hash))| {
            let argument = format!("keys[{}]", i + 1);
            let (_, key) = check(args::tenant_and_key(Some(tenant), Some(key), &argument));
            let hash = check(args::request_hash(Some(hash)));
            (key, hash)
        })
        .map(|(key, hash)| {
            claim_request(
                "idem_claim_many",
                tenant,
                key,
                hash,
                lease_and_ttl(lease, ttl),
            )
        })
        .collect();
    // SAFETY: in idem_claim_many's memory context, which lives as long as its arguments ('a,
    // as pgrx ties them to the call): the rows it returns are allocated there.
    let memory: CallMemory<'a> = unsafe { CallMemory::current() };
    let now = clock();
    // in input order, so that a key repeated in the batch meets its own earlier claim
    let outcomes: Vec<ClaimOutcome<'a>> = store::with_store(memory, |store| {
        requests.iter().map(|r| store.claim(r, now)).collect()
    });
    let mut tally = Tally::default();
    let rows: Vec<_> = requests
        .iter()
        .zip(outcomes)
        .map(|(request, outcome)| {
            count_outcome(&mut tally, &outcome);
            ClaimRow::of(outcome).with_key(request.key)
        })
        .collect();
    tally.record(tenant);
    TableIterator::new(rows)
}

#[pg_extern(sql = false)]
fn idem_checkpoint(
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    phase: Option<&str>,
    data: Option<Jsonb>,
) {
    let target = fenced_target("idem_checkpoint", tenant, key, fence);
    let phase = check(args::label(
        phase,
        "phase",
        "Name the step the attempt has finished, such as 'charged'; keep what it produced in data.",
    ));
    let data = check(args::payload(data, "data"));
    let now = clock();
    let change = FencedChange::Checkpoint { phase, data, now };
    under_fence(&target, &change);
}

#[pg_extern(sql = false)]
fn idem_assert_fence(tenant: Option<&str>, key: Option<&str>, fence: Option<i64>) {
    let target = fenced_target("idem_assert_fence", tenant, key, fence);
    under_fence(&target, &FencedChange::AssertFence);
}

#[pg_extern(sql = false)]
fn idem_downstream_key(tenant: Option<&str>, key: Option<&str>, step: Option<&str>) -> pgrx::Uuid {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    let step = check(args::label(
        step,
        "step",
        "Name the external call, such as 'charge'.",
    ));
    pgrx::Uuid::from_bytes(*hashing::downstream_key(tenant, key, step).as_bytes())
}

/// In-server tests: each runs inside one transaction that is rolled back afterwards; what needs
/// several sessions is tested through real client connections in tests/.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[allow(unused_imports)]
    use crate::testing::*;

    #[pg_test]
    fn claim_many_keeps_input_order() {
        let outcomes = one_text(
            "SELECT string_agg(key || ':' || outcome, ',') FROM idem_claim_many('claim_many_keeps_input_order', ARRAY['a', 'b', 'a'], ARRAY['h', 'h', 'x'])",
        );
        assert_eq!(outcomes.as_deref(), Some("a:claimed,b:claimed,a:mismatch"));
        assert_eq!(sqlstate_of("SELECT idem_claim_many('claim_many_keeps_input_order', ARRAY['a'], ARRAY['h', 'h'])"), "22023");
        Spi::run("SET LOCAL pg_idem.max_batch_keys = 2").unwrap();
        assert_eq!(sqlstate_of("SELECT idem_claim_many('claim_many_keeps_input_order', ARRAY['a', 'b', 'c'], ARRAY['h', 'h', 'h'])"), "54000");
    }

    #[pg_test]
    fn downstream_key_is_the_documented_uuidv5() {
        assert_eq!(
            one_text("SELECT idem_downstream_key('t', 'k', 'charge')::text").as_deref(),
            Some("3dd205ce-246b-5aac-a799-e95732144788")
        );
    }
}
