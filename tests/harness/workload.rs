//! The invariant workload: many real client connections hammer a set of keys across tenants,
//! with duplicates, in-flight collisions, rollbacks, stalls past the lease and (for the soak)
//! killed backends; afterwards the database and every observation are checked against the
//! rules of pg_idem.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::{connect_seeded, sqlstate};

/// (tenant, key)
type TenantKey = (String, String);
/// (response_code, response_body as text) of a replay
type StoredResponse = (Option<i32>, Option<String>);

/// How each request is processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// claim, business insert and complete in one transaction
    OneTransaction,
    /// claim and commit; an external side effect in its own transaction; then the business
    /// insert and complete under the fence in a final transaction
    Lease,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    pub keys: usize,
    pub tenants: usize,
    /// keys most requests go to, so that requests for one key really run at the same time
    pub hot_keys: usize,
    pub requests_per_worker: usize,
    /// upper bound on the run, whatever the request count
    pub max_duration: Duration,
    pub lease_ms: u64,
    /// share of lease-mode attempts that stall past their lease before completing
    pub stall_share: f64,
    /// share of one-transaction attempts that roll back after the business insert (a crash)
    pub rollback_share: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 32,
            keys: 1000,
            tenants: 5,
            hot_keys: 40,
            requests_per_worker: 120,
            max_duration: Duration::from_secs(120),
            lease_ms: 300,
            stall_share: 0.15,
            rollback_share: 0.05,
        }
    }
}

/// What the workers saw, kept for the checks.
#[derive(Default)]
struct Observations {
    /// (tenant, key) -> replays seen: (code, body text)
    replays: HashMap<TenantKey, Vec<StoredResponse>>,
    /// (tenant, key) -> (attempt, fence) of every claimed outcome
    claims: HashMap<(String, String), Vec<(i32, i64)>>,
    /// (tenant, key, fence) of completes that succeeded
    completed: Vec<(String, String, i64)>,
    /// (tenant, key, fence) of completes refused with 55000
    refused: Vec<(String, String, i64)>,
}

#[derive(Default, Debug)]
pub struct Counters {
    pub requests: AtomicU64,
    pub duplicates: AtomicU64,
    pub claimed: AtomicU64,
    pub replayed: AtomicU64,
    pub in_progress: AtomicU64,
    pub takeovers: AtomicU64,
    pub rolled_back: AtomicU64,
    pub stalls: AtomicU64,
    pub stale_refused: AtomicU64,
    pub connection_errors: AtomicU64,
    pub unexpected_errors: AtomicU64,
}

/// The result of a run: counts and every invariant violation found.
pub struct Report {
    pub mode: Mode,
    pub elapsed: Duration,
    pub counters: Counters,
    pub keys_completed: i64,
    pub violations: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        write!(
            f,
            "{:?}: {} requests in {:.1}s ({} duplicates), {} claimed, {} replayed, {} in_progress, {} takeovers, \
             {} rolled back, {} stalls, {} stale fences refused, {} connection errors, {} unexpected errors; \
             {} keys completed; {} violations",
            self.mode,
            get(&c.requests),
            self.elapsed.as_secs_f64(),
            get(&c.duplicates),
            get(&c.claimed),
            get(&c.replayed),
            get(&c.in_progress),
            get(&c.takeovers),
            get(&c.rolled_back),
            get(&c.stalls),
            get(&c.stale_refused),
            get(&c.connection_errors),
            get(&c.unexpected_errors),
            self.keys_completed,
            self.violations.len()
        )
    }
}

/// xorshift: no dependency, and each worker's sequence is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

fn key_of(config: &Config, rng: &mut Rng) -> (String, String) {
    let index = if rng.chance(0.6) {
        rng.below(config.hot_keys)
    } else {
        rng.below(config.keys)
    };
    (
        format!("tenant-{}", index % config.tenants),
        format!("order-{index:05}"),
    )
}

/// Creates the business tables (no unique constraint: duplicates must be visible, not prevented).
/// The workload's keys are those of the tenants `tenant-N`; its checks look at no other.
pub fn prepare(client: &mut Client) {
    client
        .batch_execute(
            "DROP TABLE IF EXISTS effects, side_calls; \
             DELETE FROM idem.keys WHERE tenant LIKE 'tenant-%'; \
             CREATE TABLE effects (tenant text, key text, fence bigint, at timestamptz DEFAULT clock_timestamp()); \
             CREATE TABLE side_calls (tenant text, key text, fence bigint, downstream text)",
        )
        .expect("create business tables");
}

/// Runs the workload and checks it. `chaos`, when set, is called repeatedly from its own thread
/// while the workers run (the soak uses it to kill backends, the maintenance test to run DDL);
/// once it returns false the workers stop after their current request.
pub fn run(
    conninfo: &str,
    mode: Mode,
    config: &Config,
    chaos: Option<&(dyn Fn(&mut Rng2) -> bool + Sync)>,
) -> Report {
    let observations = Arc::new(Mutex::new(Observations::default()));
    let counters = Arc::new(Counters::default());
    let seen: Arc<Mutex<std::collections::HashSet<(String, String)>>> = Arc::default();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    thread::scope(|scope| {
        let mut workers = Vec::new();
        for worker in 0..config.workers {
            let (observations, counters, seen) =
                (observations.clone(), counters.clone(), seen.clone());
            let stop = &stop;
            workers.push(scope.spawn(move || {
                let mut rng =
                    Rng(0x9E37_79B9_7F4A_7C15
                        ^ (worker as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let mut client = connect(conninfo);
                for _ in 0..config.requests_per_worker {
                    if started.elapsed() > config.max_duration || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let (tenant, key) = key_of(config, &mut rng);
                    counters.requests.fetch_add(1, Ordering::Relaxed);
                    if !seen.lock().unwrap().insert((tenant.clone(), key.clone())) {
                        counters.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    let result = match mode {
                        Mode::OneTransaction => one_transaction(
                            &mut client,
                            &tenant,
                            &key,
                            config,
                            &mut rng,
                            &counters,
                            &observations,
                        ),
                        Mode::Lease => lease_mode(
                            &mut client,
                            &tenant,
                            &key,
                            config,
                            &mut rng,
                            &counters,
                            &observations,
                        ),
                    };
                    if let Err(e) = result {
                        if e.is_closed()
                            || sqlstate(&e).starts_with("57")
                            || sqlstate(&e).starts_with("08")
                            || sqlstate(&e).is_empty()
                        {
                            counters.connection_errors.fetch_add(1, Ordering::Relaxed);
                            client = reconnect(conninfo, started, config.max_duration);
                        } else {
                            eprintln!("unexpected error for {tenant}/{key}: {e:?}");
                            counters.unexpected_errors.fetch_add(1, Ordering::Relaxed);
                            let _ = client.batch_execute("ROLLBACK");
                        }
                    }
                }
            }));
        }
        if let Some(chaos) = chaos {
            let stop = &stop;
            let workers_done = || workers.iter().all(|w| w.is_finished());
            let mut rng = Rng2(Rng(0xDEAD_BEEF_CAFE_F00D));
            while !workers_done() && started.elapsed() < config.max_duration {
                if !chaos(&mut rng) {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
        }
    });
    let elapsed = started.elapsed();
    let mut client = reconnect(conninfo, Instant::now(), Duration::from_secs(60));
    // the workers are gone: once their leases pass, every key must be claimable or replayed
    thread::sleep(Duration::from_millis(config.lease_ms + 100));
    let mut violations = sweep(&mut client, config, &counters, &observations);
    let observations = observations.lock().unwrap();
    violations.extend(check(&mut client, mode, &observations));
    let keys_completed: i64 = client
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE state = 'c' AND tenant LIKE 'tenant-%'",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or(-1);
    Report {
        mode,
        elapsed,
        counters: Arc::try_unwrap(counters).unwrap_or_default(),
        keys_completed,
        violations,
    }
}

/// The chaos thread's random source.
pub struct Rng2(Rng);

impl Rng2 {
    /// A sequence reproducible from `seed` (not 0).
    pub fn new(seed: u64) -> Self {
        Rng2(Rng(seed.max(1)))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
}

fn connect(conninfo: &str) -> Client {
    connect_seeded(conninfo).unwrap_or_else(|e| panic!("connect: {e}"))
}

fn reconnect(conninfo: &str, started: Instant, limit: Duration) -> Client {
    let deadline = started.max(Instant::now()) + limit.max(Duration::from_secs(60));
    loop {
        match connect_seeded(conninfo) {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("could not reconnect: {e}"),
        }
    }
}

const CLAIM: &str = "SELECT outcome, fence, attempt, response_code, response_body::text FROM idem_claim($1, $2, $3, $4::text::interval)";

fn request_hash(key: &str) -> String {
    format!("hash-of-{key}")
}

fn response_of(tenant: &str, key: &str, fence: i64) -> (i32, String) {
    (
        201,
        format!(
            r#"{{"tenant": "{tenant}", "key": "{key}", "fence": {fence}, "amount": 1234567890123.40}}"#
        ),
    )
}

type Outcome = (
    String,
    Option<i64>,
    Option<i32>,
    Option<i32>,
    Option<String>,
);

fn read_claim(row: &postgres::Row) -> Outcome {
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

fn note_outcome(
    tenant: &str,
    key: &str,
    outcome: &Outcome,
    counters: &Counters,
    observations: &Mutex<Observations>,
) {
    let (name, fence, attempt, code, body) = outcome;
    let id = (tenant.to_string(), key.to_string());
    match name.as_str() {
        "claimed" => {
            counters.claimed.fetch_add(1, Ordering::Relaxed);
            if attempt.unwrap_or(1) > 1 {
                counters.takeovers.fetch_add(1, Ordering::Relaxed);
            }
            observations
                .lock()
                .unwrap()
                .claims
                .entry(id)
                .or_default()
                .push((attempt.unwrap_or(0), fence.unwrap_or(0)));
        }
        "completed" | "failed" => {
            counters.replayed.fetch_add(1, Ordering::Relaxed);
            observations
                .lock()
                .unwrap()
                .replays
                .entry(id)
                .or_default()
                .push((*code, body.clone()));
        }
        "in_progress" => {
            counters.in_progress.fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
}

fn one_transaction(
    client: &mut Client,
    tenant: &str,
    key: &str,
    config: &Config,
    rng: &mut Rng,
    counters: &Counters,
    observations: &Mutex<Observations>,
) -> Result<(), postgres::Error> {
    let lease = format!("{} ms", config.lease_ms);
    let mut tx = client.transaction()?;
    let outcome = read_claim(&tx.query_one(CLAIM, &[&tenant, &key, &request_hash(key), &lease])?);
    note_outcome(tenant, key, &outcome, counters, observations);
    if outcome.0 != "claimed" {
        return tx.commit();
    }
    let fence = outcome.1.unwrap_or(0);
    tx.execute(
        "INSERT INTO effects (tenant, key, fence) VALUES ($1, $2, $3)",
        &[&tenant, &key, &fence],
    )?;
    // hold the transaction a little so that duplicates really arrive while it is open
    thread::sleep(Duration::from_micros(rng.below(3000) as u64));
    if rng.chance(config.rollback_share) {
        counters.rolled_back.fetch_add(1, Ordering::Relaxed);
        return tx.rollback();
    }
    let (code, body) = response_of(tenant, key, fence);
    tx.query_one(
        "SELECT idem_complete($1, $2, $3, $4, $5::text::jsonb)",
        &[&tenant, &key, &fence, &code, &body],
    )?;
    tx.commit()?;
    observations
        .lock()
        .unwrap()
        .completed
        .push((tenant.to_string(), key.to_string(), fence));
    Ok(())
}

fn lease_mode(
    client: &mut Client,
    tenant: &str,
    key: &str,
    config: &Config,
    rng: &mut Rng,
    counters: &Counters,
    observations: &Mutex<Observations>,
) -> Result<(), postgres::Error> {
    let lease = format!("{} ms", config.lease_ms);
    // 1. claim and commit (autocommit)
    let outcome =
        read_claim(&client.query_one(CLAIM, &[&tenant, &key, &request_hash(key), &lease])?);
    note_outcome(tenant, key, &outcome, counters, observations);
    if outcome.0 != "claimed" {
        return Ok(());
    }
    let fence = outcome.1.unwrap_or(0);
    // 2. the external call, recorded in its own transaction
    client.execute(
        "INSERT INTO side_calls VALUES ($1, $2, $3, (SELECT idem_downstream_key($1, $2, 'charge'))::text)",
        &[&tenant, &key, &fence],
    )?;
    if rng.chance(config.stall_share) {
        counters.stalls.fetch_add(1, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(config.lease_ms * 2));
    } else {
        thread::sleep(Duration::from_micros(rng.below(5000) as u64));
    }
    // 3. the business write and the completion under the fence, in one transaction
    let mut tx = client.transaction()?;
    tx.execute(
        "INSERT INTO effects (tenant, key, fence) VALUES ($1, $2, $3)",
        &[&tenant, &key, &fence],
    )?;
    let (code, body) = response_of(tenant, key, fence);
    match tx.query_one(
        "SELECT idem_complete($1, $2, $3, $4, $5::text::jsonb)",
        &[&tenant, &key, &fence, &code, &body],
    ) {
        Ok(_) => {
            tx.commit()?;
            observations.lock().unwrap().completed.push((
                tenant.to_string(),
                key.to_string(),
                fence,
            ));
        }
        Err(e) if sqlstate(&e) == "55000" => {
            counters.stale_refused.fetch_add(1, Ordering::Relaxed);
            observations
                .lock()
                .unwrap()
                .refused
                .push((tenant.to_string(), key.to_string(), fence));
            // the transaction is aborted: the stale business write goes with it
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

/// After the workers: claims every key once more; none may be stuck in progress past its lease.
fn sweep(
    client: &mut Client,
    config: &Config,
    counters: &Counters,
    observations: &Mutex<Observations>,
) -> Vec<String> {
    let mut violations = Vec::new();
    let lease = format!("{} ms", config.lease_ms);
    let in_progress: Vec<(String, String)> = client
        .query(
            "SELECT tenant, key FROM idem.keys WHERE state = 'p' AND tenant LIKE 'tenant-%' ORDER BY 1, 2",
            &[],
        )
        .expect("read in-progress keys")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (tenant, key) in in_progress {
        let row = match client.query_one(CLAIM, &[&tenant, &key, &request_hash(&key), &lease]) {
            Ok(row) => row,
            Err(e) => {
                violations.push(format!("sweep claim of {tenant}/{key} failed: {e:?}"));
                continue;
            }
        };
        let outcome = read_claim(&row);
        note_outcome(&tenant, &key, &outcome, counters, observations);
        match outcome.0.as_str() {
            "in_progress" => violations.push(format!(
                "{tenant}/{key} is still in progress after its lease passed"
            )),
            "claimed" => {
                let fence = outcome.1.unwrap_or(0);
                let (code, body) = response_of(&tenant, &key, fence);
                let mut tx = client.transaction().expect("sweep transaction");
                tx.execute(
                    "INSERT INTO effects (tenant, key, fence) VALUES ($1, $2, $3)",
                    &[&tenant, &key, &fence],
                )
                .expect("sweep insert");
                tx.query_one(
                    "SELECT idem_complete($1, $2, $3, $4, $5::text::jsonb)",
                    &[&tenant, &key, &fence, &code, &body],
                )
                .expect("sweep complete");
                tx.commit().expect("sweep commit");
                observations
                    .lock()
                    .unwrap()
                    .completed
                    .push((tenant, key, fence));
            }
            _ => {}
        }
    }
    violations
}

/// Checks the database against everything the workers observed.
fn check(client: &mut Client, mode: Mode, observations: &Observations) -> Vec<String> {
    let mut violations = Vec::new();
    let stored: BTreeMap<TenantKey, (String, i64, Option<i32>, Option<String>)> = client
        .query("SELECT tenant, key, state::text, fence, response_code, response_body::text FROM idem.keys WHERE tenant LIKE 'tenant-%'", &[])
        .expect("read keys")
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3), r.get(4), r.get(5))))
        .collect();
    let effects: BTreeMap<(String, String), Vec<i64>> = client
        .query("SELECT tenant, key, fence FROM effects ORDER BY at", &[])
        .expect("read effects")
        .iter()
        .fold(BTreeMap::new(), |mut m, r| {
            m.entry((r.get(0), r.get(1)))
                .or_insert_with(Vec::new)
                .push(r.get(2));
            m
        });

    // at most one business effect per key, exactly one per completed key, written by the
    // attempt whose fence completed the key
    for (id, fences) in &effects {
        if fences.len() > 1 {
            violations.push(format!(
                "{}/{}: {} business effects (fences {fences:?})",
                id.0,
                id.1,
                fences.len()
            ));
        }
    }
    for (id, (state, fence, _, _)) in &stored {
        if state == "c" {
            match effects.get(id).map(Vec::as_slice) {
                Some([only]) if only == fence => {}
                other => violations.push(format!(
                    "{}/{}: completed under fence {fence} but effects are {other:?}",
                    id.0, id.1
                )),
            }
        }
    }
    // every replay returned exactly the stored code and body
    for (id, replays) in &observations.replays {
        let Some((_, _, code, body)) = stored.get(id) else {
            violations.push(format!("{}/{}: replayed but not stored", id.0, id.1));
            continue;
        };
        for (seen_code, seen_body) in replays {
            if seen_code != code || seen_body != body {
                violations.push(format!("{}/{}: replay {seen_code:?} {seen_body:?} differs from stored {code:?} {body:?}", id.0, id.1));
            }
        }
    }
    // fences only ever grow: each attempt of a key got a larger fence than the one before
    for (id, claims) in &observations.claims {
        let mut by_attempt = claims.clone();
        by_attempt.sort();
        for pair in by_attempt.windows(2) {
            let ((a1, f1), (a2, f2)) = (pair[0], pair[1]);
            if a2 > a1 && f2 <= f1 {
                violations.push(format!(
                    "{}/{}: attempt {a2} got fence {f2}, not above attempt {a1}'s {f1}",
                    id.0, id.1
                ));
            }
        }
        let mut fences: Vec<i64> = claims.iter().map(|c| c.1).collect();
        fences.sort();
        fences.dedup();
        if fences.len() != claims.len() {
            violations.push(format!(
                "{}/{}: a fence was handed out twice: {claims:?}",
                id.0, id.1
            ));
        }
    }
    // every complete that succeeded was the key's final fence; every stale fence was refused
    let mut completions: HashMap<(String, String), Vec<i64>> = HashMap::new();
    for (tenant, key, fence) in &observations.completed {
        completions
            .entry((tenant.clone(), key.clone()))
            .or_default()
            .push(*fence);
    }
    for (id, fences) in &completions {
        if fences.len() > 1 {
            violations.push(format!(
                "{}/{}: completed {} times (fences {fences:?})",
                id.0,
                id.1,
                fences.len()
            ));
        }
        if let Some((_, stored_fence, _, _)) = stored.get(id) {
            if fences.iter().any(|f| f != stored_fence) {
                violations.push(format!(
                    "{}/{}: a complete under {fences:?} succeeded but the key holds {stored_fence}",
                    id.0, id.1
                ));
            }
        }
    }
    if mode == Mode::Lease {
        for (tenant, key, fence) in &observations.refused {
            match stored.get(&(tenant.clone(), key.clone())) {
                Some((_, stored_fence, _, _)) if stored_fence > fence => {}
                other => violations.push(format!(
                    "{tenant}/{key}: fence {fence} refused but the key is {other:?}"
                )),
            }
        }
        // and every attempt that was superseded while it stalled got refused, not accepted
        for (id, claims) in &observations.claims {
            let Some((_, final_fence, _, _)) = stored.get(id) else {
                continue;
            };
            for (_, fence) in claims {
                let accepted = completions.get(id).is_some_and(|f| f.contains(fence));
                if accepted && fence != final_fence {
                    violations.push(format!(
                        "{}/{}: stale fence {fence} was accepted",
                        id.0, id.1
                    ));
                }
            }
        }
    }
    violations
}
