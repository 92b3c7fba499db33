//! What the launcher, the purge workers and SQL share: one slot per purged database in shared
//! memory, with what its worker is doing (`WorkerState`) and what its passes did. A worker's
//! state changes only through `StateWriter::set`, which also shows it in pg_stat_activity and
//! says it in the log where that is due.

use std::ffi::CString;

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};

use crate::enum_list::enum_list;
use crate::pg::guc;

/// Most databases one server purges (entries of pg_idem.database past this are ignored, with a warning).
pub const MAX_DATABASES: usize = 16;

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

    /// What pg_stat_activity shows of a purge worker in this state; None for the states only
    /// the launcher sets, for a worker that is not running.
    fn activity(self) -> Option<(pg_sys::BackendState::Type, &'static str)> {
        match self {
            WorkerState::Paused => Some((
                pg_sys::BackendState::STATE_IDLE,
                "paused (pg_idem.purge_interval = 0)",
            )),
            WorkerState::WaitingForExtension => Some((
                pg_sys::BackendState::STATE_IDLE,
                "waiting for CREATE EXTENSION pg_idem",
            )),
            WorkerState::Purging => {
                Some((pg_sys::BackendState::STATE_RUNNING, "purging expired keys"))
            }
            WorkerState::Idle => Some((pg_sys::BackendState::STATE_IDLE, "")),
            WorkerState::NotStarted
            | WorkerState::WaitingForDatabase
            | WorkerState::WaitingForConnections => None,
        }
    }

    /// What the log says when database `database`'s worker starts waiting in this state; None
    /// for the states that are no wait worth a log line.
    fn log_line(self, database: &str) -> Option<String> {
        match self {
            WorkerState::WaitingForDatabase => Some(format!(
                "pg_idem launcher: database \"{database}\" does not exist; its purge worker starts once it is created"
            )),
            WorkerState::WaitingForConnections => Some(format!(
                "pg_idem launcher: database \"{database}\" does not accept connections (ALLOW_CONNECTIONS false, or a template such as template0); \
                 its purge worker starts once it does"
            )),
            WorkerState::WaitingForExtension => Some(format!(
                "pg_idem purge worker: extension \"pg_idem\" is not installed in database \"{database}\"; \
                 purging starts after CREATE EXTENSION pg_idem"
            )),
            WorkerState::NotStarted
            | WorkerState::Idle
            | WorkerState::Purging
            | WorkerState::Paused => None,
        }
    }
}

/// What one database's purge worker shares with the launcher and with SQL.
#[derive(Clone, Copy)]
pub struct PurgeSlot {
    name: [u8; NAME_BYTES],
    name_len: u8,
    /// private: only `StateWriter::set` changes it
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

    pub fn set_name(&mut self, name: &str) {
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

// SAFETY: a unique shared-memory name, initialised once with pg_shmem_init! in
// init_shared_memory (from register, in _PG_init).
static SLOTS: PgLwLock<PurgeSlots> = unsafe { PgLwLock::new(c"pg_idem purge workers") };

/// Requests the shared memory. Only valid from `_PG_init` during shared_preload_libraries.
pub fn init_shared_memory() {
    pg_shmem_init!(SLOTS);
}

/// The listed databases this server purges, at most MAX_DATABASES.
pub fn purged_databases() -> Vec<String> {
    let mut names = guc::databases();
    names.truncate(MAX_DATABASES);
    names
}

/// A copy of every slot in use, for SQL.
pub fn slots() -> Option<Vec<PurgeSlot>> {
    if !crate::pg::preload::active() {
        return None;
    }
    let count = purged_databases().len();
    let guard = SLOTS.share();
    Some(guard.slots[..count].to_vec())
}

/// Changes slot `index` under the exclusive lock (its state excepted: see `StateWriter`).
pub fn update_slot(index: usize, f: impl FnOnce(&mut PurgeSlot)) {
    let mut guard = SLOTS.exclusive();
    f(&mut guard.slots[index]);
}

pub fn read_slot(index: usize) -> PurgeSlot {
    SLOTS.share().slots[index]
}

/// Which process changes a purge worker's state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The launcher, for a worker that is not running (it waits for its database).
    Launcher,
    /// The purge worker itself, whose pg_stat_activity row then shows the state too.
    PurgeWorker,
}

/// The only writer of a purge worker's state (one per database in each process that changes
/// it): the slot (idem_purge_status()), pg_stat_activity when the worker changes its own, and
/// the log when a wait begins, once until `wait_is_over` (a wait that lasts is not logged at
/// every tick, nor again after a pause).
pub struct StateWriter {
    index: usize,
    database: String,
    process: Process,
    /// the waiting state last logged
    logged_wait: Option<WorkerState>,
}

impl StateWriter {
    pub fn new(index: usize, database: &str, process: Process) -> StateWriter {
        StateWriter {
            index,
            database: database.to_string(),
            process,
            logged_wait: None,
        }
    }

    pub fn set(&mut self, state: WorkerState) {
        self.set_with(state, |_| {});
    }

    /// Sets the state, and changes the rest of the slot with it (under the same lock, so SQL
    /// never sees one without the other).
    pub fn set_with(&mut self, state: WorkerState, also: impl FnOnce(&mut PurgeSlot)) {
        update_slot(self.index, |slot| {
            slot.state = state as u8;
            also(slot);
        });
        if self.process == Process::PurgeWorker {
            if let Some((backend_state, text)) = state.activity() {
                report_activity(backend_state, text);
            }
        }
        if self.logged_wait != Some(state) {
            if let Some(line) = state.log_line(&self.database) {
                log!("{line}");
                self.logged_wait = Some(state);
            }
        }
    }

    /// The wait that was logged is over (the database or the extension is there): the next
    /// wait is logged again.
    pub fn wait_is_over(&mut self) {
        self.logged_wait = None;
    }
}

fn report_activity(state: pg_sys::BackendState::Type, what: &str) {
    let text = CString::new(what).unwrap_or_default();
    // SAFETY: a NUL-terminated string that outlives the call (it is copied into shared memory).
    unsafe { pg_sys::pgstat_report_activity(state, text.as_ptr()) };
}
