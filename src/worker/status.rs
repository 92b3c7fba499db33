//! `idem_purge_status()` (declared in sql/worker.sql): what each database's purge worker is
//! doing and has done, from its slot.

use pgrx::prelude::*;

use super::slots::{self, WorkerState};

/// `idem_purge_status()`: one row per database in pg_idem.database, empty without the preload.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_purge_status() -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(pid, Option<i32>),
        name!(state, String),
        name!(started_at, Option<TimestampWithTimeZone>),
        name!(starts, i64),
        name!(last_pass_at, Option<TimestampWithTimeZone>),
        name!(last_pass_keys, Option<i64>),
        name!(last_pass_batches, Option<i64>),
        name!(last_pass_ms, Option<i64>),
        name!(total_keys, i64),
        name!(total_passes, i64),
        name!(total_batches, i64),
    ),
> {
    let slots = slots::slots().unwrap_or_default();
    let configured = slots::purged_databases();
    // SAFETY: reads this process's view of shared recovery state, as pg_is_in_recovery() does.
    let in_recovery = unsafe { pg_sys::RecoveryInProgress() };
    let ts = |micros: i64| (micros != 0).then(|| crate::pg::time::timestamptz(micros));
    TableIterator::new(slots.into_iter().zip(configured).map(move |(s, name)| {
        let passed = s.total_passes > 0;
        // a slot no launcher has tended yet (a hot standby starts none before promotion) still
        // names its database, and says why nothing runs there
        let database = match s.database() {
            "" => name,
            tended => tended.to_string(),
        };
        let state = match s.state() {
            WorkerState::NotStarted if in_recovery => "waiting for recovery to end",
            state => state.name(),
        };
        (
            database,
            (s.pid != 0).then_some(s.pid),
            state.to_string(),
            ts(s.started_at),
            s.starts,
            ts(s.last_pass_at),
            passed.then_some(s.last_pass_keys),
            passed.then_some(s.last_pass_batches),
            passed.then_some(s.last_pass_ms),
            s.total_keys,
            s.total_passes,
            s.total_batches,
        )
    }))
}
