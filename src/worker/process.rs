//! What the launcher and the purge workers do alike as background workers: their signal
//! handlers, waiting for their latch, reloading the settings, and leaving binary-upgrade mode
//! alone.
//!
//! In binary-upgrade mode (pg_upgrade starts the old and the new server with `-b`) nothing of
//! this runs: pg_upgrade reads the old cluster's next transaction ID before it starts the old
//! server and hands it to the new cluster, so any transaction committed meanwhile would have its
//! XID reused there (PostgreSQL keeps autovacuum off in that mode for the same reason).
//!
//! SIGTERM is PostgreSQL's own `die`: it sets ProcDiePending and the latch, so a worker waiting
//! inside PostgreSQL (a lock, a long statement) leaves at its next CHECK_FOR_INTERRUPTS, with
//! the transaction rolled back, while a worker waiting for its latch between transactions sees
//! the flag and exits without an error.

use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;

/// Whether the server was started in binary-upgrade mode (`postgres -b`, as pg_upgrade starts
/// both the old and the new cluster).
pub fn binary_upgrade() -> bool {
    // SAFETY: a plain bool the postmaster sets from its command line before it loads
    // shared_preload_libraries and never changes afterwards; every child inherits it on fork.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// Ends a launcher or purge worker that finds itself in binary-upgrade mode, before it starts
/// any transaction. Defensive: `register` does not start the launcher in that mode, so this
/// only runs if a worker got started some other way. Exit code 0 unregisters it, so the
/// postmaster does not start it again during the upgrade.
pub fn leave_if_binary_upgrade(who: &str) {
    if binary_upgrade() {
        log!(
            "{who}: staying idle and exiting: the server runs in binary-upgrade mode (pg_upgrade), \
             where a purge would commit transactions whose IDs the upgraded cluster reuses"
        );
        // SAFETY: ends this worker process the way PostgreSQL expects; no transaction is open.
        unsafe { pg_sys::proc_exit(0) };
    }
}

unsafe extern "C-unwind" {
    /// PostgreSQL's SIGTERM handler for backends (tcop/postgres.c), declared here by its C
    /// symbol: pgrx's `pg_sys::die` is a Rust wrapper (with an error boundary), not a function a
    /// signal handler pointer may name.
    #[link_name = "die"]
    fn postgres_die(postgres_signal_arg: std::ffi::c_int);
}

/// Installs the signal handlers of the launcher and the purge workers, and unblocks signals.
///
/// SIGTERM gets PostgreSQL's `die` instead of pgrx's handler (which only sets a flag of its own
/// and the latch): `die` also sets InterruptPending and ProcDiePending, so that a wait inside
/// PostgreSQL (a lock wait, a long statement) ends at its next CHECK_FOR_INTERRUPTS with
/// `FATAL: terminating background worker ... due to administrator command`, its transaction
/// rolled back, instead of waiting on while the postmaster waits for this process to exit.
/// Between transactions `wait_latch` notices ProcDiePending first and the worker exits cleanly.
/// SIGHUP keeps pgrx's handler (`sighup_received`).
pub fn attach_signal_handlers() {
    // SAFETY: the postmaster starts a background worker with signals blocked, so SIGTERM cannot
    // arrive before its handler is in place; `die` is PostgreSQL's handler for exactly this
    // signal in backends (only async-signal-safe work: two flags and SetLatch), and has the
    // signature pqsignal expects. pgrx's attach_signal_handlers then unblocks the signals.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(postgres_die));
        #[cfg(feature = "pg18")]
        pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(postgres_die));
    }
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP);
}

/// Whether SIGTERM (pg_terminate_backend, a shutdown) asked this process to exit.
pub fn shutdown_requested() -> bool {
    // SAFETY: a sig_atomic_t the signal handler sets; a volatile read of a process global.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ProcDiePending) != 0 }
}

/// Waits until the latch is set or `timeout` passed; false when the process must exit (SIGTERM,
/// or the postmaster died). Replaces pgrx's `BackgroundWorker::wait_latch`, which learns of
/// SIGTERM only through pgrx's own handler, and whose CHECK_FOR_INTERRUPTS would turn the
/// pending `die` into a FATAL here, between transactions, where a plain exit is due.
pub fn wait_latch(timeout: Duration) -> bool {
    if shutdown_requested() {
        return false;
    }
    let events = (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_POSTMASTER_DEATH) as i32;
    let millis = timeout.as_millis().min(i32::MAX as u128) as std::ffi::c_long;
    // SAFETY: MyLatch is this process's latch, set up before the worker's main function runs;
    // WaitLatch and ResetLatch are called outside any critical section, as PostgreSQL requires.
    let woke = unsafe {
        let woke = pg_sys::WaitLatch(pg_sys::MyLatch, events, millis, pg_sys::PG_WAIT_EXTENSION);
        pg_sys::ResetLatch(pg_sys::MyLatch);
        woke
    };
    if woke & pg_sys::WL_POSTMASTER_DEATH as i32 != 0 || shutdown_requested() {
        return false;
    }
    // anything else pending (a procsignal barrier, a memory-context dump request)
    pgrx::check_for_interrupts!();
    true
}

/// Reloads the configuration after a SIGHUP; true if there was one.
pub fn reload_config_if_asked() -> bool {
    let asked = BackgroundWorker::sighup_received();
    if asked {
        // SAFETY: called between transactions, as ProcessConfigFile requires.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
    asked
}
