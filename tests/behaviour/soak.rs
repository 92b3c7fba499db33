//! The soak: the invariant workload for minutes, in both modes, while backends are killed at
//! random. Not part of the regular suite; run it with
//!
//!     SOAK_SECONDS=600 cargo test -p pg_idem_tests --test soak -- --ignored --nocapture
//!
//! It prints every kill it made and every invariant check it ran.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pg_idem_tests::workload::{self, Config, Mode, Rng2};
use pg_idem_tests::*;

#[test]
#[ignore = "minutes long: run it on its own (see the top of this file)"]
fn soak_with_killed_backends() {
    let total = Duration::from_secs(
        std::env::var("SOAK_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300),
    );
    let server = Server::start(&[
        "pg_idem.purge_interval = '500ms'",
        "restart_after_crash = on",
    ]);
    let terminated = AtomicU64::new(0);
    let killed = AtomicU64::new(0);
    let started = Instant::now();
    let mut round = 0;
    let mut failures = Vec::new();
    while started.elapsed() < total {
        round += 1;
        let mode = if round % 2 == 1 {
            Mode::OneTransaction
        } else {
            Mode::Lease
        };
        workload::prepare(&mut reconnect(&server));
        let remaining = total
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(20));
        let config = Config {
            // enough keys that claims, takeovers and kills go on for the whole round instead
            // of every key being completed in its first seconds and replayed from then on
            keys: 20_000,
            requests_per_worker: 100_000,
            max_duration: remaining.min(Duration::from_secs(90)),
            ..Config::default()
        };
        let conninfo = server.conninfo("postgres");
        let chaos = |rng: &mut Rng2| {
            std::thread::sleep(Duration::from_millis(200 + rng.below(1300) as u64));
            let Ok(mut admin) = Client::connect(&conninfo, NoTls) else {
                return true;
            };
            let pids: Vec<i32> = admin
                .query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()", &[])
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default();
            if pids.is_empty() {
                return true;
            }
            let victim = pids[rng.below(pids.len())];
            if rng.below(20) == 0 {
                // the whole server goes through crash recovery
                println!("  kill -9 backend {victim}");
                kill_9(victim);
                killed.fetch_add(1, Ordering::Relaxed);
            } else if admin
                .query_one("SELECT pg_terminate_backend($1)", &[&victim])
                .is_ok()
            {
                terminated.fetch_add(1, Ordering::Relaxed);
            }
            true
        };
        println!(
            "round {round}: {mode:?} for up to {:?}",
            config.max_duration
        );
        let report = workload::run(&conninfo, mode, &config, Some(&chaos));
        println!("  {report}");
        failures.extend(
            report
                .violations
                .iter()
                .map(|v| format!("round {round}: {v}")),
        );
    }
    println!(
        "soak: {round} rounds in {:.0}s; {} backends terminated, {} killed with SIGKILL; {} violations",
        started.elapsed().as_secs_f64(),
        terminated.load(Ordering::Relaxed),
        killed.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "invariants violated:\n{}",
        failures.join("\n")
    );
}

fn reconnect(server: &Server) -> Client {
    let mut client = None;
    wait_for("the server", Duration::from_secs(60), || {
        client = Client::connect(&server.conninfo("postgres"), NoTls).ok();
        client.is_some()
    });
    client.unwrap()
}
