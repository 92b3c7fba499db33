//! Message consumers (declared in sql/consumers.sql): exactly-once processing of messages that
//! arrive at least once, in one statement (the inbox pattern), and batches completed in one
//! round trip.
//!
//! `idem_consume` records a message as processed in the caller's transaction and says whether
//! it is new: the caller applies its effect in the same transaction, so a rollback, a crash or
//! a killed backend takes the record with it and the redelivery is new again. A duplicate whose
//! first delivery is still in flight waits for that transaction (as INSERT ... ON CONFLICT
//! does) and gets a definite answer: a consumer never acknowledges a message that ends up
//! unprocessed. The rule is `rules::consumes::plan_consume`.

use pgrx::datum::{Array, Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::errors;
use crate::pg::datum::{CallMemory, Jsonb};
use crate::pg::guc;
use crate::pg::time::{clock, timestamptz};
use crate::rules::{ConsumeRequest, Consumed, Fenced, FencedChange, State};
use crate::sql_api::args::{self, check};
use crate::sql_api::calls::{fenced_target, unless_refused};
use crate::stats::{self, Event, Tally};
use crate::store;
use crate::tenants;

/// Counts what a consume found.
/// Counts what a consume found.
fn count(tally: &mut Tally, consumed: Consumed) {
    match consumed {
        Consumed::New { takeover } => {
            if takeover {
                tally.add(Event::Takeover);
            }
            tally.add(Event::Consumed);
        }
        Consumed::Duplicate => tally.add(Event::ConsumeDuplicate),
    }
}

#[pg_extern(sql = false)]
fn idem_consume(tenant: Option<&str>, key: Option<&str>, ttl: Option<Interval>) -> bool {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    let ttl_us = check(args::duration(ttl, "ttl", guc::ttl_us()));
    tenants::check_access(tenant);
    let request = ConsumeRequest {
        function: "idem_consume",
        tenant,
        key,
        ttl_us,
    };
    let now = clock();
    // SAFETY: in idem_consume's memory context; nothing allocated there is returned.
    let memory = unsafe { CallMemory::current() };
    let consumed = store::with_store(memory, |store| store.consume(&request, now));
    let consumed = consumed.unwrap_or_else(|held| {
        stats::record(tenant, Event::InProgress);
        held.raise()
    });
    let mut tally = Tally::default();
    count(&mut tally, consumed);
    tally.record(tenant);
    matches!(consumed, Consumed::New { .. })
}

/// The elements of a non-NULL array argument, none NULL, at most pg_idem.max_batch_keys of
/// them (counted before any is read).
fn batch_elements<'b, T>(
    array: Option<&'b Array<'_, T>>,
    argument: &str,
    hint: &str,
) -> Vec<T::As<'b>>
where
    T: pgrx::datum::UnboxDatum + FromDatum,
{
    let array = array.unwrap_or_else(|| errors::null_argument(argument, hint).raise());
    args::check_batch_size(array.len(), argument);
    array
        .iter()
        .enumerate()
        .map(|(i, element)| {
            element.unwrap_or_else(|| {
                errors::null_argument(
                    &format!("{argument}[{}]", i + 1),
                    "Remove NULL elements from the batch.",
                )
                .raise()
            })
        })
        .collect()
}

#[pg_extern(sql = false)]
fn idem_consume_many<'a>(
    tenant: Option<&'a str>,
    keys: Option<Array<'a, &'a str>>,
    ttl: Option<Interval>,
) -> SetOfIterator<'a, String> {
    let tenant = check(args::name(tenant, "tenant"));
    let ttl_us = check(args::duration(ttl, "ttl", guc::ttl_us()));
    tenants::check_access(tenant);
    let keys = batch_elements(
        keys.as_ref(),
        "keys",
        "Pass an array of message keys, such as ARRAY['m1', 'm2'].",
    );
    let requests: Vec<ConsumeRequest<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let argument = format!("keys[{}]", i + 1);
            let (_, key) = check(args::tenant_and_key(Some(tenant), Some(key), &argument));
            ConsumeRequest {
                function: "idem_consume_many",
                tenant,
                key,
                ttl_us,
            }
        })
        .collect();
    let now = clock();
    // in input order, so that a key repeated in the batch meets its own consume: new once
    // SAFETY: in idem_consume_many's memory context; nothing allocated there is returned.
    let memory = unsafe { CallMemory::current() };
    let answers: Vec<Result<Consumed, errors::IdemError>> = store::with_store(memory, |store| {
        let mut answers = Vec::with_capacity(requests.len());
        for request in &requests {
            let answer = store.consume(request, now);
            let stop = answer.is_err();
            answers.push(answer);
            if stop {
                break;
            }
        }
        answers
    });
    let mut new = Vec::new();
    let mut tally = Tally::default();
    for (request, answer) in requests.iter().zip(answers) {
        let consumed = answer.unwrap_or_else(|held| {
            // what the batch found before is counted too, as a single call each would have been
            tally.add(Event::InProgress);
            tally.record(tenant);
            held.raise()
        });
        count(&mut tally, consumed);
        if matches!(consumed, Consumed::New { .. }) {
            new.push(request.key.to_string());
        }
    }
    tally.record(tenant);
    SetOfIterator::new(new)
}

#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_complete_many<'a>(
    tenant: Option<&'a str>,
    keys: Option<Array<'a, &'a str>>,
    fences: Option<Array<'a, i64>>,
    response_codes: Option<Array<'a, i32>>,
    response_bodies: Option<Array<'a, Jsonb<'a>>>,
) -> TableIterator<'a, (name!(key, String), name!(expires_at, TimestampWithTimeZone))> {
    let tenant = check(args::name(tenant, "tenant"));
    tenants::check_access(tenant);
    let keys = batch_elements(
        keys.as_ref(),
        "keys",
        "Pass the keys idem_claim_many claimed, such as ARRAY['k1', 'k2'].",
    );
    let fences = batch_elements(
        fences.as_ref(),
        "fences",
        "Pass the fence idem_claim_many returned for each key, in the same order.",
    );
    let codes = response_codes.unwrap_or_else(|| {
        errors::null_argument(
            "response_codes",
            "Pass one response code per key (NULL elements are allowed).",
        )
        .raise()
    });
    let same_length = |argument: &str, len: usize| {
        if len != keys.len() {
            errors::invalid_argument(
                argument,
                "must have one element per key",
                format!("keys has {} elements, {argument} {len}.", keys.len()),
                "Pass arrays of the same length, the i-th element for the i-th key.",
            )
            .raise();
        }
    };
    same_length("fences", fences.len());
    same_length("response_codes", codes.len());
    if let Some(bodies) = &response_bodies {
        same_length("response_bodies", bodies.len());
    }
    let codes: Vec<Option<i32>> = codes.iter().collect();
    let bodies: Vec<Option<Jsonb<'_>>> = match &response_bodies {
        Some(bodies) => bodies
            .iter()
            .enumerate()
            .map(|(i, body)| check(args::payload(body, &format!("response_bodies[{}]", i + 1))))
            .collect(),
        None => vec![None; keys.len()],
    };
    let targets: Vec<Fenced<'_>> = keys
        .iter()
        .zip(&fences)
        .enumerate()
        .map(|(i, (key, fence))| {
            let argument = format!("keys[{}]", i + 1);
            check(args::tenant_and_key(Some(tenant), Some(key), &argument));
            fenced_target("idem_complete_many", Some(tenant), Some(key), Some(*fence))
        })
        .collect();
    let now = clock();
    // all or nothing: the first refusal raises, and the statement (with the transaction's
    // business writes) fails as a single idem_complete would
    // SAFETY: in idem_complete_many's memory context; nothing allocated there is returned.
    let memory = unsafe { CallMemory::current() };
    let results: Vec<_> = store::with_store(memory, |store| {
        let mut results = Vec::with_capacity(targets.len());
        for ((target, code), body) in targets.iter().zip(&codes).zip(&bodies) {
            let change = FencedChange::Finish {
                state: State::Completed,
                response_code: *code,
                response_body: *body,
                now,
            };
            let result = store.fenced(target, &change);
            let stop = result.is_err();
            results.push(result);
            if stop {
                break;
            }
        }
        results
    });
    let rows: Vec<_> = targets
        .iter()
        .zip(results)
        .map(|(target, result)| {
            let expires_at = unless_refused(target, result).expires_at;
            (target.key.to_string(), timestamptz(expires_at))
        })
        .collect();
    TableIterator::new(rows)
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
    fn consume_is_new_once() {
        assert_eq!(
            Spi::get_one::<bool>("SELECT idem_consume('consume_is_new_once', 'm1')").unwrap(),
            Some(true)
        );
        assert_eq!(
            Spi::get_one::<bool>("SELECT idem_consume('consume_is_new_once', 'm1')").unwrap(),
            Some(false)
        );
        assert_eq!(
            one_text(
                "SELECT string_agg(k, ',') FROM idem_consume_many('consume_is_new_once', ARRAY['m1', 'm2', 'm3', 'm2']) AS k"
            )
            .as_deref(),
            Some("m2,m3")
        );
        assert_eq!(
            claim("consume_is_new_once", "m2", "").outcome,
            "completed",
            "a consumed message replays as completed under the empty fingerprint"
        );
    }

    #[pg_test]
    fn complete_many_completes_a_claimed_batch() {
        let t = "complete_many_completes_a_claimed_batch";
        let completed = one_i64(&format!(
            "WITH c AS (SELECT array_agg(key ORDER BY key) AS keys, array_agg(fence ORDER BY key) AS fences \
               FROM idem_claim_many('{t}', ARRAY['a', 'b', 'c'], ARRAY['h', 'h', 'h'])) \
             SELECT count(*) FROM c, idem_complete_many('{t}', c.keys, c.fences, ARRAY[200, 201, NULL], \
                    ARRAY['{{\"n\": 1}}', NULL, '{{}}']::jsonb[]) AS m"
        ));
        assert_eq!(completed, Some(3));
        assert_eq!(
            one_text(&format!(
                "SELECT string_agg(outcome || ':' || coalesce(response_code::text, '-'), ',' ORDER BY key) \
                 FROM idem_claim_many('{t}', ARRAY['a', 'b', 'c'], ARRAY['h', 'h', 'h'])"
            ))
            .as_deref(),
            Some("completed:200,completed:201,completed:-")
        );
    }
}
