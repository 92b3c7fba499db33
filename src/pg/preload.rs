//! Whether pg_idem was loaded by shared_preload_libraries, the only time it can have shared
//! memory (the counters, the purge workers' slots) and background workers. Set once in the
//! postmaster; forked backends inherit it.

use std::sync::atomic::{AtomicBool, Ordering};

static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Called by `_PG_init` after the shared memory was requested.
pub fn mark() {
    PRELOADED.store(true, Ordering::Relaxed);
}

/// True when shared memory exists: pg_idem is in shared_preload_libraries.
pub fn active() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}
