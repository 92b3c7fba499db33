//! The purge worker: expired keys go away by themselves, with no pg_cron and no application timer.
//!
//! With `shared_preload_libraries = 'pg_idem'` the postmaster starts one *launcher*, connected to
//! no database (it can read the shared catalog pg_database). For each database listed in
//! `pg_idem.database` it starts a *purge worker* once that database exists, and starts it again
//! a few seconds after it exits for any reason (pg_terminate_backend, an error, a dropped
//! database). A missing database, or one that refuses connections, is logged once, not in a
//! crash loop. A purge worker leaves its database as soon as a DROP DATABASE waits for it.
//!
//! A purge worker connects to its database and, every `pg_idem.purge_interval`, runs a pass:
//! batches of at most `pg_idem.purge_batch_size` keys, each its own short transaction, through
//! the same code as `idem_purge()`, checking for SIGTERM between batches (and, see below, in a
//! batch that waits inside PostgreSQL). Where pg_idem is not
//! installed (yet) it says so once in the log and looks again every interval.
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

use std::ffi::CString;
use std::time::{Duration, Instant};

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};

use crate::enum_list::enum_list;
use crate::pg::guc;
use crate::store;

/// Most databases one server purges (entries of pg_idem.database past this are ignored, with a warning).
pub const MAX_DATABASES: usize = 16;

/// How soon the launcher starts a purge worker again after it exited.
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// How often the launcher looks at its workers when nothing wakes it.
const LAUNCHER_TICK: Duration = Duration::from_secs(1);

/// How often a purge worker looks for CREATE EXTENSION pg_idem while it is missing.
const EXTENSION_POLL: Duration = Duration::from_secs(1);

const NAME_BYTES: usize = 64;

enum_list! {
/// What a purge worker is doing, as idem_purge_status() shows it; kept in shared memory as its
/// position in `WorkerState::ALL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    NotStarted,
    WaitingForDatabase,
    WaitingForExtension,
    Idle,
    Purging,
    Paused,
    /// The database exists but does not accept connections (datallowconn is false).
    WaitingForConnections,
}
}

impl WorkerState {
    pub fn name(self) -> &'static str {
        match self {
            WorkerState::NotStarted => "not started",
            WorkerState::WaitingForDatabase => "waiting for database",
            WorkerState::WaitingForExtension => "waiting for extension",
            WorkerState::Idle => "idle",
            WorkerState::Purging => "purging",
            WorkerState::Paused => "paused",
            WorkerState::WaitingForConnections => "waiting for database to accept connections",
        }
    }

    /// The state a slot holds. Only pg_idem writes slots, so another byte is a bug: said loudly.
    fn from_u8(v: u8) -> WorkerState {
        WorkerState::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or_else(|| {
                crate::errors::internal("reading a purge worker's slot", format!("state byte {v}"))
                    .raise()
            })
    }
}

/// What one database's purge worker shares with the launcher and with SQL.
#[derive(Clone, Copy)]
pub struct PurgeSlot {
    name: [u8; NAME_BYTES],
    name_len: u8,
    state: u8,
    pub pid: i32,
    pub started_at: i64,
    pub starts: i64,
    pub last_pass_at: i64,
    pub last_pass_keys: i64,
    pub last_pass_batches: i64,
    pub last_pass_ms: i64,
    pub total_keys: i64,
    pub total_passes: i64,
    pub total_batches: i64,
}

impl Default for PurgeSlot {
    fn default() -> Self {
        PurgeSlot {
            name: [0; NAME_BYTES],
            name_len: 0,
            state: WorkerState::NotStarted as u8,
            pid: 0,
            started_at: 0,
            starts: 0,
            last_pass_at: 0,
            last_pass_keys: 0,
            last_pass_batches: 0,
            last_pass_ms: 0,
            total_keys: 0,
            total_passes: 0,
            total_batches: 0,
        }
    }
}

impl PurgeSlot {
    pub fn database(&self) -> &str {
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }

    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state)
    }

    fn set_name(&mut self, name: &str) {
        let bytes = name.as_bytes();
        let len = bytes.len().min(NAME_BYTES);
        self.name = [0; NAME_BYTES];
        self.name[..len].copy_from_slice(&bytes[..len]);
        self.name_len = len as u8;
    }
}

#[derive(Clone, Copy, Default)]
pub struct PurgeSlots {
    slots: [PurgeSlot; MAX_DATABASES],
}

// SAFETY: fixed-size arrays of bytes and integers, no pointers: valid in every process.
unsafe impl PGRXSharedMemory for PurgeSlots {}

// SAFETY: a unique shared-memory name, initialised once with pg_shmem_init! in register().
static SLOTS: PgLwLock<PurgeSlots> = unsafe { PgLwLock::new(c"pg_idem purge workers") };

/// Requests the shared memory and registers the launcher. Only from `_PG_init` while preloading.
pub fn register() {
    // the shared memory is requested either way: idem_purge_status() reads it
    pg_shmem_init!(SLOTS);
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

/// Whether the server was started in binary-upgrade mode (`postgres -b`, as pg_upgrade starts
/// both the old and the new cluster).
fn binary_upgrade() -> bool {
    // SAFETY: a plain bool the postmaster sets from its command line before it loads
    // shared_preload_libraries and never changes afterwards; every child inherits it on fork.
    unsafe { pg_sys::IsBinaryUpgrade }
}

/// Ends a launcher or purge worker that finds itself in binary-upgrade mode, before it starts
/// any transaction. Defensive: `register` does not start the launcher in that mode, so this
/// only runs if a worker got started some other way. Exit code 0 unregisters it, so the
/// postmaster does not start it again during the upgrade.
fn leave_if_binary_upgrade(who: &str) {
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
fn attach_signal_handlers() {
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
fn shutdown_requested() -> bool {
    // SAFETY: a sig_atomic_t the signal handler sets; a volatile read of a process global.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ProcDiePending) != 0 }
}

/// Waits until the latch is set or `timeout` passed; false when the process must exit (SIGTERM,
/// or the postmaster died). Replaces pgrx's `BackgroundWorker::wait_latch`, which learns of
/// SIGTERM only through pgrx's own handler, and whose CHECK_FOR_INTERRUPTS would turn the
/// pending `die` into a FATAL here, between transactions, where a plain exit is due.
fn wait_latch(timeout: Duration) -> bool {
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

/// The listed databases this server purges, at most MAX_DATABASES.
fn purged_databases() -> Vec<String> {
    let mut names = guc::databases();
    names.truncate(MAX_DATABASES);
    names
}

/// A copy of every slot in use, for SQL.
fn slots() -> Option<Vec<PurgeSlot>> {
    if !crate::pg::preload::active() {
        return None;
    }
    let count = purged_databases().len();
    let guard = SLOTS.share();
    Some(guard.slots[..count].to_vec())
}

fn update_slot(index: usize, f: impl FnOnce(&mut PurgeSlot)) {
    let mut guard = SLOTS.exclusive();
    f(&mut guard.slots[index]);
}

fn read_slot(index: usize) -> PurgeSlot {
    SLOTS.share().slots[index]
}

/// Reloads the configuration after a SIGHUP; true if there was one.
fn reload_config_if_asked() -> bool {
    let asked = BackgroundWorker::sighup_received();
    if asked {
        // SAFETY: called between transactions, as ProcessConfigFile requires.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
    asked
}

fn report_activity(state: pg_sys::BackendState::Type, what: &str) {
    let text = CString::new(what).unwrap_or_default();
    // SAFETY: a NUL-terminated string that outlives the call (it is copied into shared memory).
    unsafe { pg_sys::pgstat_report_activity(state, text.as_ptr()) };
}

// ---------------------------------------------------------------------------------------------
// The launcher
// ---------------------------------------------------------------------------------------------

struct Launched {
    handle: Option<DynamicBackgroundWorker>,
    last_start: Option<Instant>,
    /// What was last logged about the database not being there to connect to (logged once).
    reported: Option<DatabaseStatus>,
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
        update_slot(i, |slot| slot.set_name(name));
    }
    let mut launched: Vec<Launched> = databases
        .iter()
        .map(|_| Launched {
            handle: None,
            last_start: None,
            reported: None,
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
    let running = registered || read_slot(index).pid != 0;
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
    let status = database_status(name);
    if status != DatabaseStatus::Accepting {
        let (state, why) = match status {
            DatabaseStatus::Missing => (
                WorkerState::WaitingForDatabase,
                "does not exist; its purge worker starts once it is created",
            ),
            _ => (
                WorkerState::WaitingForConnections,
                "does not accept connections (ALLOW_CONNECTIONS false, or a template such as template0); \
                 its purge worker starts once it does",
            ),
        };
        update_slot(index, |slot| slot.state = state as u8);
        if launched.reported != Some(status) {
            log!("pg_idem launcher: database \"{name}\" {why}");
            launched.reported = Some(status);
        }
        return;
    }
    launched.reported = None;
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

// ---------------------------------------------------------------------------------------------
// The purge worker
// ---------------------------------------------------------------------------------------------

#[pg_guard]
unsafe extern "C-unwind" fn clear_slot_pid(_code: i32, arg: pg_sys::Datum) {
    let index = arg.value();
    // SAFETY: MyProcPid is this process's pid, set at process start.
    let me = unsafe { pg_sys::MyProcPid };
    update_slot(index, |slot| {
        if slot.pid == me {
            slot.pid = 0;
        }
    });
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_idem_purge_main(arg: pg_sys::Datum) {
    let index = arg.value();
    let databases = purged_databases();
    let Some(database) = databases.get(index).cloned() else {
        return;
    };
    leave_if_binary_upgrade("pg_idem purge worker");
    attach_signal_handlers();

    // one purge worker per database, even if a restarted launcher started a second one
    // SAFETY: MyProcPid is this process's pid, set at process start.
    let me = unsafe { pg_sys::MyProcPid };
    let mut duplicate = false;
    update_slot(index, |slot| {
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

    let mut reported_missing_extension = false;
    loop {
        reload_config_if_asked();
        let interval = guc::purge_interval_ms();
        if interval == 0 {
            update_slot(index, |slot| slot.state = WorkerState::Paused as u8);
            report_activity(
                pg_sys::BackendState::STATE_IDLE,
                "paused (pg_idem.purge_interval = 0)",
            );
            if !idle(&database, None) {
                break;
            }
            continue;
        }
        let mut wait = Duration::from_millis(interval);
        if extension_installed() {
            reported_missing_extension = false;
            if !purge_pass(index, &database) {
                break;
            }
        } else {
            wait = wait.min(EXTENSION_POLL);
            update_slot(index, |slot| {
                slot.state = WorkerState::WaitingForExtension as u8
            });
            report_activity(
                pg_sys::BackendState::STATE_IDLE,
                "waiting for CREATE EXTENSION pg_idem",
            );
            if !reported_missing_extension {
                log!(
                    "pg_idem purge worker: extension \"pg_idem\" is not installed in database \"{database}\"; \
                     purging starts after CREATE EXTENSION pg_idem"
                );
                reported_missing_extension = true;
            }
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

/// How often an idle purge worker checks that nobody waits to drop its database.
const DROP_POLL: Duration = Duration::from_secs(1);

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
fn purge_pass(index: usize, database: &str) -> bool {
    update_slot(index, |slot| slot.state = WorkerState::Purging as u8);
    report_activity(pg_sys::BackendState::STATE_RUNNING, "purging expired keys");
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
            crate::pg::sql::with_client(|client| {
                let now = crate::pg::time::clock();
                store::purge_batch(client, now, batch, cursor, store::Tenants::Every)
            })
        });
        crate::stats::record_purged(done.deleted);
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
    update_slot(index, |slot| {
        slot.state = WorkerState::Idle as u8;
        slot.last_pass_at = now;
        slot.last_pass_keys = keys;
        slot.last_pass_batches = batches;
        slot.last_pass_ms = elapsed_ms;
        slot.total_keys += keys;
        slot.total_passes += 1;
        slot.total_batches += batches;
    });
    if keys > 0 {
        debug1!("pg_idem purge worker: deleted {keys} expired keys from database \"{database}\" in {batches} batches, {elapsed_ms} ms");
    }
    report_activity(pg_sys::BackendState::STATE_IDLE, "");
    keep_running
}

// ---------------------------------------------------------------------------------------------
// What the workers are doing, from SQL
// ---------------------------------------------------------------------------------------------

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
    let slots = slots().unwrap_or_default();
    let configured = purged_databases();
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
