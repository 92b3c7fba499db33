//! The launcher: registered from `_PG_init`, started by the postmaster, connected to no database
//! (it can read the shared catalog pg_database). For each database listed in
//! `pg_idem.database` it starts a purge worker once that database exists, and starts it again
//! a few seconds after it exits for any reason (pg_terminate_backend, an error, a dropped
//! database). A missing database, or one that refuses connections, is logged once, not in a
//! crash loop.

use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, DynamicBackgroundWorker};
use pgrx::prelude::*;

use super::process::{
    attach_signal_handlers, binary_upgrade, leave_if_binary_upgrade, reload_config_if_asked,
    wait_latch,
};
use super::slots::{self, Process, StateWriter, WorkerState, MAX_DATABASES};
use crate::pg::guc;

/// How soon the launcher starts a purge worker again after it exited.
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// How often the launcher looks at its workers when nothing wakes it.
const LAUNCHER_TICK: Duration = Duration::from_secs(1);

/// Requests the shared memory and registers the launcher. Only from `_PG_init` while preloading.
pub fn register() {
    // the shared memory is requested either way: idem_purge_status() reads it
    slots::init_shared_memory();
    if guc::databases().is_empty() {
        return;
    }
    if binary_upgrade() {
        log!(
            "pg_idem: not starting the purge launcher: the server runs in binary-upgrade mode (pg_upgrade), \
             where a purge would commit transactions whose IDs the upgraded cluster reuses; purging resumes \
             at the next normal start"
        );
        return;
    }
    BackgroundWorkerBuilder::new("pg_idem launcher")
        .set_type("pg_idem launcher")
        .set_library("pg_idem")
        .set_function("pg_idem_launcher_main")
        .enable_spi_access()
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// What the launcher knows of one database's purge worker.
struct Launched {
    handle: Option<DynamicBackgroundWorker>,
    last_start: Option<Instant>,
    /// the worker's state while it waits for its database (logged once per wait)
    state: StateWriter,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idem_launcher_main(_arg: pg_sys::Datum) {
    leave_if_binary_upgrade("pg_idem launcher");
    attach_signal_handlers();
    // no database: the launcher only reads the shared catalog pg_database
    BackgroundWorker::connect_worker_to_spi(None, None);

    let mut databases = guc::databases();
    if databases.len() > MAX_DATABASES {
        log!(
            "pg_idem launcher: pg_idem.database lists {} databases; only the first {MAX_DATABASES} are purged",
            databases.len()
        );
        databases.truncate(MAX_DATABASES);
    }
    for (i, name) in databases.iter().enumerate() {
        slots::update_slot(i, |slot| slot.set_name(name));
    }
    let mut launched: Vec<Launched> = databases
        .iter()
        .enumerate()
        .map(|(i, name)| Launched {
            handle: None,
            last_start: None,
            state: StateWriter::new(i, name, Process::Launcher),
        })
        .collect();

    loop {
        reload_config_if_asked();
        for (i, name) in databases.iter().enumerate() {
            tend(i, name, &mut launched[i]);
        }
        if !wait_latch(LAUNCHER_TICK) {
            break;
        }
    }
    // exit non-zero so that the postmaster starts the launcher again after pg_terminate_backend
    // SAFETY: ends this process the way PostgreSQL expects a background worker to.
    unsafe { pg_sys::proc_exit(1) };
}

/// Starts the purge worker of database `index` if it is not running and may be started.
fn tend(index: usize, name: &str, launched: &mut Launched) {
    let registered = launched.handle.as_ref().is_some_and(|h| {
        !matches!(
            h.pid(),
            Err(pgrx::bgworkers::BackgroundWorkerStatus::Stopped)
        )
    });
    // a worker started by an earlier launcher (before this one was restarted) shows in the slot
    let running = registered || slots::read_slot(index).pid != 0;
    if running {
        return;
    }
    launched.handle = None;
    if launched
        .last_start
        .is_some_and(|t| t.elapsed() < RESTART_DELAY)
    {
        return;
    }
    match database_status(name) {
        DatabaseStatus::Missing => {
            launched.state.set(WorkerState::WaitingForDatabase);
            return;
        }
        DatabaseStatus::RefusingConnections => {
            launched.state.set(WorkerState::WaitingForConnections);
            return;
        }
        DatabaseStatus::Accepting => launched.state.wait_is_over(),
    }
    launched.last_start = Some(Instant::now());
    let started = BackgroundWorkerBuilder::new(&format!("pg_idem purge {name}"))
        .set_type("pg_idem purge")
        .set_library("pg_idem")
        .set_function("pg_idem_purge_main")
        .set_argument((index as i32).into_datum())
        .enable_spi_access()
        // SAFETY: MyProcPid is this process's pid, set at process start.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    match started {
        Ok(handle) => launched.handle = Some(handle),
        Err(_) => log!(
            "pg_idem launcher: could not start the purge worker for database \"{name}\"; raise max_worker_processes"
        ),
    }
}

/// What pg_database says of a database a purge worker would connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DatabaseStatus {
    Missing,
    /// datallowconn is false: connecting would only FATAL, over and over.
    RefusingConnections,
    Accepting,
}

/// Whether `name` is in pg_database, and accepts connections. A backend connected to no database has no catalog indexes
/// at hand, so this scans the (small) shared catalog as the autovacuum launcher does.
fn database_status(name: &str) -> DatabaseStatus {
    // SAFETY: (the block) a heap scan of the shared catalog pg_database inside a transaction;
    // every tuple returned is a valid pg_database row until the next heap_getnext.
    BackgroundWorker::transaction(|| unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(pg_sys::DatabaseRelationId, lock);
        let scan = pg_sys::table_beginscan_catalog(relation, 0, std::ptr::null_mut());
        let mut found = DatabaseStatus::Missing;
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let header = (*tuple).t_data;
            let form = (header as *const u8).add((*header).t_hoff as usize)
                as *const pg_sys::FormData_pg_database;
            if std::ffi::CStr::from_ptr((*form).datname.data.as_ptr()).to_bytes() == name.as_bytes()
            {
                found = if (*form).datallowconn {
                    DatabaseStatus::Accepting
                } else {
                    DatabaseStatus::RefusingConnections
                };
                break;
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(relation, lock);
        found
    })
}
