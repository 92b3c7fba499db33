//! The pg_idem.* settings. Defined in `_PG_init` whether or not the library is preloaded, so that
//! `SHOW` and `SET` work in every session; the prefix is reserved so a typo is an error.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Microseconds per millisecond / second, for the unit conversions below.
const MICROS_PER_MS: i64 = 1_000;
const MICROS_PER_S: i64 = 1_000_000;

pub static LEASE_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);
pub static TTL_S: GucSetting<i32> = GucSetting::<i32>::new(86_400);
pub static MAX_KEY_LENGTH: GucSetting<i32> = GucSetting::<i32>::new(255);
pub static MAX_RESPONSE_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);
pub static MAX_BATCH_KEYS: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static REJECT_STALE_UUIDV7: GucSetting<bool> = GucSetting::<bool>::new(false);
/// Whether a role may act only on tenants granted to it (idem_grant_tenant). Superuser-only to
/// change, so that a role cannot switch the check off for its own session.
static TENANT_GRANTS: GucSetting<bool> = GucSetting::<bool>::new(false);
pub static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub static PURGE_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);
pub static PURGE_BATCH_DELAY_MS: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static PURGE_BATCH_SIZE: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static PURGE_MAX_RATE: GucSetting<i32> = GucSetting::<i32>::new(60_000);

pub fn init() {
    GucRegistry::define_int_guc(
        c"pg_idem.lease_timeout",
        c"Lease of a claim when idem_claim or idem_heartbeat gets no lease argument.",
        c"After the lease has passed without a completion, the next claim with the same request hash takes the key over.",
        &LEASE_TIMEOUT_MS,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idem.ttl",
        c"How long a key is kept when idem_claim gets no ttl argument.",
        c"A completed or failed key is replayed for at least this long after its response was stored.",
        &TTL_S,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_idem.max_key_length",
        c"Longest tenant or key accepted, in characters.",
        c"Longer tenants or keys are refused with SQLSTATE 22023.",
        &MAX_KEY_LENGTH,
        1,
        1024,
        GucContext::Suset,
        GucFlags::empty(),
    );
    GucRegistry::define_int_guc(
        c"pg_idem.max_response_bytes",
        c"Largest response_body or checkpoint data accepted.",
        c"Larger bodies are refused with SQLSTATE 54000 and nothing is stored.",
        &MAX_RESPONSE_BYTES,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"pg_idem.max_batch_keys",
        c"Most keys one idem_claim_many call accepts.",
        c"Larger batches are refused with SQLSTATE 54000; every new key claimed holds one lock until commit.",
        &MAX_BATCH_KEYS,
        1,
        100_000,
        GucContext::Suset,
        GucFlags::empty(),
    );
    GucRegistry::define_bool_guc(
        c"pg_idem.reject_stale_uuidv7",
        c"Answer stale_key to a claim of an absent UUIDv7 key older than its ttl.",
        c"Such a key may have run and been purged already, so running it again could repeat its effect.",
        &REJECT_STALE_UUIDV7,
        GucContext::Userset,
        GucFlags::empty(),
    );
    GucRegistry::define_bool_guc(
        c"pg_idem.tenant_grants",
        c"Let each role act only on the tenants granted to it (or to a role it has the privileges of) with idem_grant_tenant().",
        c"Off: any role that may call the functions may act on any tenant. Only superusers can change it (ALTER DATABASE ... SET, ALTER ROLE ... SET, or postgresql.conf).",
        &TENANT_GRANTS,
        GucContext::Suset,
        GucFlags::empty(),
    );
    // a postmaster setting can only be defined while preloading, which is also the only time
    // there is a purge worker for it to configure
    // SAFETY: a flag the postmaster sets while it loads shared_preload_libraries.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_string_guc(
            c"pg_idem.database",
            c"Databases the purge worker purges, comma-separated.",
            c"One purge worker runs per listed database. Needs shared_preload_libraries = 'pg_idem'.",
            &DATABASE,
            GucContext::Postmaster,
            GucFlags::SUPERUSER_ONLY,
        );
    }
    GucRegistry::define_int_guc(
        c"pg_idem.purge_interval",
        c"Time between two purge passes of the purge worker; 0 pauses purging.",
        c"Each pass deletes expired keys in batches of pg_idem.purge_batch_size, one short transaction each.",
        &PURGE_INTERVAL_MS,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idem.purge_batch_size",
        c"Most keys the purge worker deletes in one transaction.",
        c"Small batches keep each purge transaction short.",
        &PURGE_BATCH_SIZE,
        1,
        1_000_000,
        GucContext::Sighup,
        GucFlags::empty(),
    );
    GucRegistry::define_int_guc(
        c"pg_idem.purge_batch_delay",
        c"Pause of the purge worker between two batches of one pass; 0 runs them back to back.",
        c"A backlog purged at full speed writes WAL as fast as the disk takes it, and commits of \
          other sessions wait for that WAL to be flushed; a pause spreads the pass out.",
        &PURGE_BATCH_DELAY_MS,
        0,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_idem.purge_max_rate",
        c"Most keys per second the purge worker deletes in one pass; 0 for no limit.",
        c"The worker paces its batches to this budget, so that a large backlog is deleted \
          steadily instead of in a burst that takes CPU, WAL bandwidth and I/O from claims.",
        &PURGE_MAX_RATE,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::empty(),
    );
    reserve_prefix();
}

#[cfg(feature = "pg14")]
fn reserve_prefix() {
    // SAFETY: a NUL-terminated static prefix, called from _PG_init.
    unsafe { pgrx::pg_sys::EmitWarningsOnPlaceholders(c"pg_idem".as_ptr()) }
}

#[cfg(not(feature = "pg14"))]
fn reserve_prefix() {
    // SAFETY: a NUL-terminated static prefix, called from _PG_init.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"pg_idem".as_ptr()) }
}

pub fn lease_timeout_us() -> i64 {
    i64::from(LEASE_TIMEOUT_MS.get()) * MICROS_PER_MS
}

pub fn ttl_us() -> i64 {
    i64::from(TTL_S.get()) * MICROS_PER_S
}

pub fn max_key_length() -> usize {
    usize::try_from(MAX_KEY_LENGTH.get()).unwrap_or(usize::MAX)
}

pub fn max_response_bytes() -> usize {
    usize::try_from(MAX_RESPONSE_BYTES.get()).unwrap_or(usize::MAX)
}

pub fn max_batch_keys() -> usize {
    usize::try_from(MAX_BATCH_KEYS.get()).unwrap_or(usize::MAX)
}

pub fn reject_stale_uuidv7() -> bool {
    REJECT_STALE_UUIDV7.get()
}

pub fn tenant_grants() -> bool {
    TENANT_GRANTS.get()
}

/// The databases listed in pg_idem.database, trimmed, without empties or repeats.
pub fn databases() -> Vec<String> {
    let raw = DATABASE
        .get()
        .and_then(|c| c.into_string().ok())
        .unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for name in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

pub fn purge_interval_ms() -> u64 {
    u64::try_from(PURGE_INTERVAL_MS.get()).unwrap_or(0)
}

pub fn purge_batch_size() -> i64 {
    i64::from(PURGE_BATCH_SIZE.get())
}

/// The purge worker's budget in keys per second; None for no limit.
pub fn purge_max_rate() -> Option<f64> {
    let rate = PURGE_MAX_RATE.get();
    (rate > 0).then_some(f64::from(rate))
}

pub fn purge_batch_delay() -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(PURGE_BATCH_DELAY_MS.get()).unwrap_or(0))
}
