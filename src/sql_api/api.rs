//! The core SQL API (declared in sql/api.sql): argument checks, defaults from the settings, the
//! key store underneath, and the shape of each result.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::errors;
use crate::hashing;
use crate::hashing::canonical_json;
use crate::hashing::jsonb_walk;
use crate::pg::cluster;
use crate::pg::datum::{CallMemory, Jsonb, Record};
use crate::pg::guc;
use crate::pg::time::{clock, timestamptz};
use crate::rules::{FencedChange, State};
use crate::sql_api::args::{self, check};
use crate::sql_api::calls::{
    claim_request, count_outcome, fenced_target, lease_and_ttl, under_fence, ClaimRow,
};
use crate::stats::{self, Tally};
use crate::store;
use crate::tenants;

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
    let times = lease_and_ttl(lease, ttl);
    let request = claim_request("idem_claim", tenant, key, request_hash, times);
    // SAFETY: in idem_claim's memory context; the outcome is shaped into its result before it
    // returns, so 'm is this call.
    let memory = unsafe { CallMemory::current() };
    let outcome = store::claim(memory, &request, clock());
    let mut tally = Tally::default();
    count_outcome(&mut tally, &outcome);
    tally.record(tenant);
    // built after SPI is gone: the row must live in the caller's memory context
    ClaimRow::of(outcome).into_record(fcinfo)
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
    let target = fenced_target(function, tenant, key, fence);
    let body = check(args::payload(response_body, "response_body"));
    let now = clock();
    let change = FencedChange::Finish {
        state,
        response_code,
        response_body: body,
        now,
    };
    timestamptz(under_fence(&target, &change).expires_at)
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
    let target = fenced_target("idem_release", tenant, key, fence);
    under_fence(&target, &FencedChange::Release);
}

#[pg_extern(sql = false)]
fn idem_heartbeat(
    tenant: Option<&str>,
    key: Option<&str>,
    fence: Option<i64>,
    lease: Option<Interval>,
) -> TimestampWithTimeZone {
    let target = fenced_target("idem_heartbeat", tenant, key, fence);
    let lease_us = check(args::duration(lease, "lease", guc::lease_timeout_us()));
    let change = FencedChange::Heartbeat {
        lease_us,
        now: clock(),
    };
    let times = under_fence(&target, &change);
    timestamptz(
        times
            .lease_expires_at
            .unwrap_or_else(|| crate::errors::internal("a heartbeat", "no lease after it").raise()),
    )
}

#[pg_extern(sql = false)]
fn idem_forget(tenant: Option<&str>, key: Option<&str>) -> bool {
    let (tenant, key) = check(args::tenant_and_key(tenant, key, "key"));
    tenants::check_access(tenant);
    store::forget("idem_forget", tenant, key)
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
    let limit = max_rows.map(i64::from);
    // with tenant grants on, a role purges (and so locks) only its own tenants' keys
    let own_tenants = tenants::purgeable_tenants();
    let scope = match &own_tenants {
        None => store::Tenants::Every,
        Some(own) => store::Tenants::Only(own),
    };
    let deleted = store::purge(now, limit, scope);
    stats::record_purged(deleted);
    // on a Citus coordinator, the shards on the worker nodes too (their counters count them)
    // (not for a role limited to its own tenants: the nodes' purge workers purge theirs)
    if own_tenants.is_none() && cluster::coordinator_of_distributed_keys() {
        return deleted + cluster::purge_worker_nodes(max_rows);
    }
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

/// The library's version: what answers a call. `\dx` shows the version of the extension's SQL
/// objects, which `ALTER EXTENSION pg_idem UPDATE` brings up to it. (The SQL edition's body is
/// its install's version, which no catalog records for a plain install.)
#[pg_extern(sql = false)]
fn idem_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The row trigger `lift_fence_clock` of idem.keys (sql/api.sql): a fence written through the
/// executor (a restore's COPY or INSERT, a row written by hand, a logical replica's apply: it
/// is ENABLE ALWAYS) lifts the fence clock to it, so a server that handed out fences before
/// draws every later fence above the restored ones at once, not only after its next start. The
/// key store's engine writes without the executor and does not fire it (its fences come from
/// that clock; `heap::Table` accepts this trigger and no other); on the SPI path it finds the
/// clock there already. Changes no row.
#[pg_trigger(sql = false)]
fn idem_lift_fence_clock<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    if let Some(Ok(Some(fence))) = trigger.new().map(|row| row.get_by_name::<i64>("fence")) {
        store::fences::seen(fence);
    }
    Ok(None)
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
    fn every_claim_outcome() {
        let Answer {
            outcome: o,
            fence: f1,
            attempt: a,
            ..
        } = claim("every_claim_outcome", "k", "h");
        assert_eq!((o.as_str(), a), ("claimed", Some(1)));
        let f1 = f1.expect("fence");
        let Answer {
            outcome: o,
            fence: f,
            ..
        } = claim("every_claim_outcome", "k", "h");
        assert_eq!(
            (o.as_str(), f),
            ("in_progress", None),
            "a claim held by this transaction"
        );
        assert_eq!(
            claim("every_claim_outcome", "k", "other").outcome,
            "mismatch"
        );
        Spi::run(&format!(
            "SELECT idem_complete('every_claim_outcome', 'k', {f1}, 201, '{{\"id\": 1}}')"
        ))
        .unwrap();
        assert_eq!(claim("every_claim_outcome", "k", "h").outcome, "completed");
        assert_eq!(
            one_text("SELECT response_body::text FROM idem_claim('every_claim_outcome', 'k', 'h')")
                .as_deref(),
            Some(r#"{"id": 1}"#)
        );
        let Answer { fence: f2, .. } = claim("every_claim_outcome", "k2", "h");
        Spi::run(&format!(
            "SELECT idem_fail_final('every_claim_outcome', 'k2', {}, 402, NULL)",
            f2.unwrap()
        ))
        .unwrap();
        assert_eq!(claim("every_claim_outcome", "k2", "h").outcome, "failed");
        assert_eq!(
            one_i64(
                "SELECT response_code::bigint FROM idem_claim('every_claim_outcome', 'k2', 'h')"
            ),
            Some(402)
        );
        Spi::run("SET LOCAL pg_idem.reject_stale_uuidv7 = on").unwrap();
        assert_eq!(
            claim(
                "every_claim_outcome",
                "00000000-0000-7000-8000-000000000000",
                "h"
            )
            .outcome,
            "stale_key"
        );
    }

    #[pg_test]
    fn mismatch_and_replays_reveal_no_fence() {
        let Answer { fence: f, .. } = claim("mismatch_and_replays_reveal_no_fence", "k", "h");
        Spi::run(&format!(
            "SELECT idem_complete('mismatch_and_replays_reveal_no_fence', 'k', {}, 200)",
            f.unwrap()
        ))
        .unwrap();
        let hidden = one_i64("SELECT count(*) FROM idem_claim('mismatch_and_replays_reveal_no_fence', 'k', 'x') WHERE fence IS NULL AND attempt IS NULL \
                              AND response_code IS NULL AND response_body IS NULL AND expires_at IS NULL");
        assert_eq!(hidden, Some(1));
        assert_eq!(one_i64("SELECT count(*) FROM idem_claim('mismatch_and_replays_reveal_no_fence', 'k', 'h') WHERE fence IS NULL"), Some(1));
    }

    // A #[pg_test] is one transaction, and a takeover needs another one: takeovers are tested through
    // real sessions (tests/behaviour/sessions.rs, tests/behaviour/extras.rs). Inside the
    // transaction that holds the key, an expired lease is no reason to take its own key over.
    #[pg_test]
    fn own_claim_past_its_lease_stays_in_progress() {
        let t = "own_claim_past_its_lease_stays_in_progress";
        let f1 = one_i64(&format!(
            "SELECT fence FROM idem_claim('{t}', 'k', 'h', '10 ms')"
        ))
        .unwrap();
        Spi::run("SELECT pg_sleep(0.05)").unwrap();
        assert_eq!(
            claim(t, "k", "other").outcome,
            "mismatch",
            "another hash is still a mismatch"
        );
        let Answer {
            outcome: o,
            fence: f2,
            attempt: a,
            ..
        } = claim(t, "k", "h");
        assert_eq!(
            (o.as_str(), f2, a),
            ("in_progress", None, Some(1)),
            "no takeover of its own claim"
        );
        assert_eq!(
            sqlstate_of(&format!("SELECT idem_complete('{t}', 'k', {f1}, 200)")),
            "00000",
            "its fence still holds"
        );
    }

    #[pg_test]
    fn release_forget_and_purge() {
        let f1 = claim("release_forget_and_purge", "k", "h").fence.unwrap();
        Spi::run(&format!(
            "SELECT idem_release('release_forget_and_purge', 'k', {f1})"
        ))
        .unwrap();
        let Answer {
            outcome: o,
            fence: f2,
            attempt: a,
            ..
        } = claim("release_forget_and_purge", "k", "h");
        assert_eq!(
            (o.as_str(), a),
            ("claimed", Some(1)),
            "a released key is claimed afresh"
        );
        assert!(f2.unwrap() > f1);
        assert_eq!(
            Spi::get_one::<bool>("SELECT idem_forget('release_forget_and_purge', 'k')").unwrap(),
            Some(true)
        );
        assert_eq!(
            Spi::get_one::<bool>("SELECT idem_forget('release_forget_and_purge', 'k')").unwrap(),
            Some(false)
        );
        // expired: completed with a 1 ms ttl; kept: a live lease outliving its ttl
        let f3 = one_i64(
            "SELECT fence FROM idem_claim('release_forget_and_purge', 'gone', 'h', '1 ms', '1 ms')",
        )
        .unwrap();
        Spi::run(&format!(
            "SELECT idem_complete('release_forget_and_purge', 'gone', {f3}, 200)"
        ))
        .unwrap();
        Spi::run("SELECT idem_claim('release_forget_and_purge', 'kept', 'h', '1 min', '1 ms')")
            .unwrap();
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        assert_eq!(one_i64("SELECT idem_purge()"), Some(1));
        assert_eq!(
            one_i64("SELECT count(*) FROM idem.keys WHERE key = 'kept'"),
            Some(1)
        );
        assert_eq!(one_i64("SELECT idem_purge(0)"), Some(0));
    }

    #[pg_test]
    fn expired_key_counts_as_absent() {
        let f = one_i64("SELECT fence FROM idem_claim('expired_key_counts_as_absent', 'k', 'h', '1 ms', '1 ms')").unwrap();
        Spi::run(&format!(
            "SELECT idem_complete('expired_key_counts_as_absent', 'k', {f}, 200)"
        ))
        .unwrap();
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        let Answer {
            outcome: o,
            attempt: a,
            ..
        } = claim("expired_key_counts_as_absent", "k", "another hash");
        assert_eq!((o.as_str(), a), ("claimed", Some(1)));
    }

    #[pg_test]
    fn fenced_operations_return_the_new_times() {
        let t = "fenced_operations_return_the_new_times";
        let f = claim(t, "k", "h").fence.unwrap();
        // each new time is the call's clock plus the interval exactly: between the clock read
        // before the call and the one read after it (the select list runs after the function)
        let within = |call: &str, interval: &str| {
            let before = one_text("SELECT clock_timestamp()::text").unwrap();
            Spi::get_one::<bool>(&format!(
                "SELECT t BETWEEN '{before}'::timestamptz + interval '{interval}' \
                 AND clock_timestamp() + interval '{interval}' FROM {call} AS t"
            ))
            .unwrap()
        };
        assert_eq!(
            within(
                &format!("idem_heartbeat('{t}', 'k', {f}, '5 min')"),
                "5 min"
            ),
            Some(true),
            "a heartbeat extends the lease by exactly 5 minutes"
        );
        assert_eq!(
            within(&format!("idem_complete('{t}', 'k', {f}, 200)"), "24 hours"),
            Some(true),
            "a completed key is replayed for the default ttl of 24 hours"
        );
    }

    #[pg_test]
    fn completes_are_hot_updates() {
        // the columns idem_complete changes are not indexed, so its updates stay on the page
        Spi::run(
            "SELECT idem_complete('completes_are_hot_updates', 'k' || g, (idem_claim('completes_are_hot_updates', 'k' || g, 'h')).fence, 200, '{\"ok\": true}')
             FROM generate_series(1, 500) AS g",
        )
        .unwrap();
        let row = Spi::get_two::<i64, i64>(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'idem.keys'::regclass",
        )
        .unwrap();
        let (updates, hot) = (row.0.unwrap_or(0), row.1.unwrap_or(0));
        assert_eq!(updates, 500);
        assert!(
            hot * 100 >= updates * 95,
            "only {hot} of {updates} completes were HOT"
        );
    }

    #[pg_test]
    fn request_hash_is_canonical() {
        let same = Spi::get_one::<bool>(
            "SELECT idem_request_hash('{\"b\": [1, 2.50], \"a\": {\"y\": null, \"x\": true}}')
                  = idem_request_hash('{\"a\":{\"x\":true,\"y\":null},\"b\":[1,2.5]}')",
        )
        .unwrap();
        assert_eq!(
            same,
            Some(true),
            "key order, whitespace and number spelling do not matter"
        );
        assert_eq!(
            one_text("SELECT idem_request_hash('{}'::jsonb)").as_deref(),
            Some("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
            "SHA-256 of the canonical text {{}}"
        );
        let method = Spi::get_one::<bool>(
            "SELECT idem_request_hash('post', '/v1/x', '{\"a\": 1}') = idem_request_hash('POST', '/v1/x', '{\"a\":1}')",
        )
        .unwrap();
        assert_eq!(method, Some(true), "the method is case-insensitive");
        let path = Spi::get_one::<bool>(
            "SELECT idem_request_hash('POST', '/v1/x', '{}') <> idem_request_hash('POST', '/v1/X', '{}')",
        )
        .unwrap();
        assert_eq!(path, Some(true), "the path is not");
        let amounts = Spi::get_one::<bool>(
            "SELECT idem_request_hash('{\"amount\": 12345678901234567890.1}') <> idem_request_hash('{\"amount\": 12345678901234567890.2}')",
        )
        .unwrap();
        assert_eq!(amounts, Some(true), "numbers are never rounded");
        assert_eq!(
            one_text("SELECT idem_request_hash(NULL::jsonb)"),
            one_text("SELECT idem_request_hash('null'::jsonb)")
        );
    }

    /// Hashes computed outside pg_idem (Python's hashlib over the canonical text written out by hand
    /// from the documented rules): the canonical form must never change, or every stored request
    /// hash would turn into a mismatch after an upgrade.
    #[pg_test]
    fn request_hash_matches_independently_computed_vectors() {
        let vectors: &[(&str, &str)] = &[
            (
                r#"{"b": [1, 2.50, -0, 1E2, 0.000100], "a": {"y": null, "x": true}, "é": "tab\there \"q\" \\ \u0001", "z": 12345678901234567890.10, "": false}"#,
                "1561978ba4ea209c86e31d5450fd1bb3353e10f3e08c634d7539af00da178e86",
            ),
            (
                r#""just a string""#,
                "3fe01def54b1c6cd795b2ebfcbab64150f6a507bce043040c662c682eebfed1e",
            ),
            (
                r#"[]"#,
                "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
            ),
            (
                r#"3.0"#,
                "4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce",
            ),
            (
                r#"null"#,
                "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
            ),
            (
                r#"{"bb":1,"a":2,"ab":3,"b":4}"#,
                "23e0acb302d2892225ab8b841182377e6b60d0d913600d8fa322cc817101f394",
            ),
            (
                r#"{"k": "😀\u00e9"}"#,
                "1b4bb2235fca6cd7ab1667b19805b22809f55f80894fd5a12e2e7dae1558ed8d",
            ),
            (
                r#"[1, "a", 2.5, [true, "bc", 3], {"x": "yz", "w": 1.10}]"#,
                "7d674b3652d809458dbd997ad2803dfed506ec21af75bf3ce8bde9ddf5b864bd",
            ),
        ];
        for (input, expected) in vectors {
            let got = Spi::get_one_with_args::<String>(
                "SELECT idem_request_hash($1::jsonb)",
                &[(*input).into()],
            )
            .unwrap();
            assert_eq!(
                got.as_deref(),
                Some(*expected),
                "idem_request_hash({input})"
            );
        }
        // more than 32 members: jsonb stores every 32nd entry as an offset, not a length
        assert_eq!(
            one_text("SELECT idem_request_hash(jsonb_object_agg('k' || g, g)) FROM generate_series(0, 99) AS g").as_deref(),
            Some("64e8d1c7cf2b2eb4be855a4fa6a5721be90147bf298b12b1d8ec72d2d67f7a13")
        );
        assert_eq!(
            one_text("SELECT idem_request_hash('post', '/v1/Charges', '{\"amount\": 42.00}')")
                .as_deref(),
            Some("c0b3ca64c800022b85777c978d374b51eb7765a3d0a7c9181f33c0eb711e91ef"),
            "the canonical [\"POST\",\"/v1/Charges\",{{\"amount\":42}}]"
        );
    }

    #[pg_test]
    fn new_keys_are_time_ordered_uuidv7() {
        let v = Spi::get_one::<bool>(
            "WITH k AS (SELECT idem_new_key() AS a, idem_new_key() AS b)
             SELECT substr(a::text, 15, 1) = '7' AND a <> b FROM k",
        )
        .unwrap();
        assert_eq!(v, Some(true));
        let ordered = Spi::get_one::<bool>(
            "WITH k AS (SELECT idem_new_key() AS a), w AS (SELECT pg_sleep(0.005)), l AS (SELECT idem_new_key() AS b FROM w)
             SELECT a < b FROM k, l",
        )
        .unwrap();
        assert_eq!(ordered, Some(true));
    }
}
