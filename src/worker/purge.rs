//! The purge worker of one database. It connects to its database and, every
//! `pg_idem.purge_interval`, runs a pass: batches of at most `pg_idem.purge_batch_size` keys,
//! each its own short transaction, through the same code as `idem_purge()`, checking for
//! SIGTERM between batches (and, see `process`, in a batch that waits inside PostgreSQL). Where
//! pg_idem is not installed (yet) it says so once in the log and looks again every interval.
//! It leaves its database as soon as a DROP DATABASE waits for it.

use std::time::{Duration, Instant};

use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;

use super::process::{
    attach_signal_handlers, leave_if_binary_upgrade, reload_config_if_asked, shutdown_requested,
    wait_latch,
};
use super::slots::{self, Process, StateWriter, WorkerState};
use crate::pg::guc;
use crate::store;

/// How often a purge worker looks for CREATE EXTENSION pg_idem while it is missing.
const EXTENSION_POLL: Duration = Duration::from_secs(1);

/// How often an idle purge worker checks that nobody waits to drop its database.
const DROP_POLL: Duration = Duration::from_secs(1);

#[pg_guard]
unsafe extern "C-unwind" fn clear_slot_pid(_code: i32, arg: pg_sys::Datum) {
    let index = arg.value();
    // SAFETY: MyProcPid is this process's pid, set at process start.
    let me = unsafe { pg_sys::MyProcPid };
    slots::update_slot(index, |slot| {
        if slot.pid == me {
            slot.pid = 0;
        }
    });
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idem_purge_main(arg: pg_sys::Datum) {
    let index = arg.value();
    let databases = slots::purged_databases();
    let Some(database) = databases.get(index).cloned() else {
        return;
    };
    leave_if_binary_upgrade("pg_idem purge worker");
    attach_signal_handlers();

    // one purge worker per database, even if a restarted launcher started a second one
    // SAFETY: MyProcPid is this process's pid, set at process start.
    let me = unsafe { pg_sys::MyProcPid };
    let mut duplicate = false;
    slots::update_slot(index, |slot| {
        if slot.pid != 0 && slot.pid != me {
            duplicate = true;
        } else {
            slot.pid = me;
            slot.started_at = crate::pg::time::clock();
            slot.starts += 1;
        }
    });
    if duplicate {
        return;
    }
    // SAFETY: registers a callback with a plain integer argument; it runs at process exit.
    unsafe { pg_sys::before_shmem_exit(Some(clear_slot_pid), pg_sys::Datum::from(index)) };

    BackgroundWorker::connect_worker_to_spi(Some(&database), None);

    let mut state = StateWriter::new(index, &database, Process::PurgeWorker);
    loop {
        reload_config_if_asked();
        let interval = guc::purge_interval_ms();
        if interval == 0 {
            state.set(WorkerState::Paused);
            if !idle(&database, None) {
                break;
            }
            continue;
        }
        let mut wait = Duration::from_millis(interval);
        if extension_installed() {
            state.wait_is_over();
            if !purge_pass(&mut state, &database) {
                break;
            }
        } else {
            wait = wait.min(EXTENSION_POLL);
            state.set(WorkerState::WaitingForExtension);
        }
        if !idle(&database, Some(wait)) {
            break;
        }
    }
    // exit non-zero on SIGTERM, as pg_cron does; the launcher starts a new worker unless the
    // server is shutting down
    // SAFETY: ends this process the way PostgreSQL expects a background worker to.
    unsafe { pg_sys::proc_exit(1) };
}

/// Waits `wait` (forever when None), in steps of DROP_POLL, leaving the database as soon as a
/// DROP DATABASE waits for it; false on SIGTERM or postmaster death.
fn idle(database: &str, wait: Option<Duration>) -> bool {
    let until = wait.map(|w| Instant::now() + w);
    loop {
        leave_if_database_is_wanted(database);
        let step = match until {
            Some(t) => t.saturating_duration_since(Instant::now()).min(DROP_POLL),
            None => DROP_POLL,
        };
        if !wait_latch(step) {
            return false;
        }
        // a SIGHUP (a new interval, say) ends the wait early, as a plain wait_latch would
        if reload_config_if_asked() {
            return true;
        }
        if until.is_some_and(|t| Instant::now() >= t) {
            return true;
        }
    }
}

/// DROP DATABASE (and ALTER DATABASE ... RENAME / SET TABLESPACE) holds an exclusive lock on the
/// database while it waits up to 5 s for the other sessions to leave; it signals autovacuum
/// workers, but not background workers. So the purge worker looks for that lock itself (a
/// conditional share lock on the database object fails while it is held) and leaves at once,
/// so the DROP succeeds without FORCE. The launcher starts the worker again 2 s later; by then
/// the database is gone (logged once as missing) or, if the DROP failed, it is back to work.
fn leave_if_database_is_wanted(database: &str) {
    let wanted = BackgroundWorker::transaction(|| {
        // SAFETY: a lock tag for the current database as a shared object (as LockSharedObject
        // builds it); dontWait = true never blocks, and a lock taken is released at once.
        unsafe {
            let tag = pg_sys::LOCKTAG {
                locktag_field1: pg_sys::InvalidOid.to_u32(),
                locktag_field2: pg_sys::DatabaseRelationId.to_u32(),
                locktag_field3: pg_sys::MyDatabaseId.to_u32(),
                locktag_field4: 0,
                locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
                locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
            };
            let mode = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
            match pg_sys::LockAcquire(&tag, mode, false, true) {
                pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => true,
                _ => {
                    pg_sys::LockRelease(&tag, mode, false);
                    false
                }
            }
        }
    });
    if wanted {
        log!(
            "pg_idem purge worker: leaving database \"{database}\": DROP DATABASE or ALTER DATABASE is waiting for it"
        );
        // SAFETY: ends this worker process; exit code 0 unregisters it, and the launcher starts
        // a new one when the database accepts connections again.
        unsafe { pg_sys::proc_exit(0) };
    }
}

fn extension_installed() -> bool {
    BackgroundWorker::transaction(
        // SAFETY: a catalog look-up by a NUL-terminated static name, inside a transaction.
        || unsafe { pg_sys::get_extension_oid(c"pg_idem".as_ptr(), true) } != pg_sys::InvalidOid,
    )
}

/// One purge pass in batches; false when SIGTERM arrived and the worker must exit.
fn purge_pass(state: &mut StateWriter, database: &str) -> bool {
    state.set(WorkerState::Purging);
    let started = Instant::now();
    let batch = guc::purge_batch_size();
    let mut keys: i64 = 0;
    let mut batches: i64 = 0;
    let mut cursor = store::PurgeCursor::start();
    let mut keep_running = true;
    loop {
        leave_if_binary_upgrade("pg_idem purge worker");
        if shutdown_requested() {
            keep_running = false;
            break;
        }
        let done = BackgroundWorker::transaction(|| {
            let now = crate::pg::time::clock();
            store::purge_batch(now, batch, cursor, store::Tenants::Every)
        });
        crate::stats::record_purged(done.deleted);
        // the rows it deleted count towards autovacuum and pg_stat_user_tables from now on
        crate::pg::pg_version::report_table_statistics(!done.more);
        keys += done.deleted;
        batches += 1;
        cursor = done.cursor;
        if !done.more {
            break;
        }
        // between batches: pause as asked, and long enough to stay within the budget of keys
        // per second; stop promptly on SIGTERM (it sets the latch and ends the pause), pick up
        // a new batch size, delay or budget on SIGHUP
        let budget_wait = guc::purge_max_rate()
            .map(|rate| Duration::from_secs_f64(keys as f64 / rate))
            .and_then(|due| due.checked_sub(started.elapsed()))
            .unwrap_or_default();
        if !wait_latch(guc::purge_batch_delay().max(budget_wait)) {
            keep_running = false;
            break;
        }
        leave_if_database_is_wanted(database);
        reload_config_if_asked();
    }
    let elapsed_ms = started.elapsed().as_millis() as i64;
    let now = crate::pg::time::clock();
    if keys > 0 {
        debug1!("pg_idem purge worker: deleted {keys} expired keys from database \"{database}\" in {batches} batches, {elapsed_ms} ms");
    }
    // the pass's numbers change with the state, so idem_purge_status() never shows one without the other
    state.set_with(WorkerState::Idle, |slot| {
        slot.last_pass_at = now;
        slot.last_pass_keys = keys;
        slot.last_pass_batches = batches;
        slot.last_pass_ms = elapsed_ms;
        slot.total_keys += keys;
        slot.total_passes += 1;
        slot.total_batches += batches;
    });
    keep_running
}
