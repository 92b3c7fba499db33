//! The key store without the executor: idem.keys read through its primary key index and written
//! with the heap and index access methods (`crate::pg::heap`), for every hot path (claim, complete,
//! fail, release, heartbeat, checkpoint, assert_fence, forget). Chosen once per backend (again
//! after any change to idem.keys) when idem.keys is a plain heap table `heap::Table` can write
//! exactly as the executor would, and Citus is not installed (Citus must plan every statement
//! on a distributed idem.keys); otherwise `spi` runs.
//!
//! Concurrency, with no lock held for a key (only the speculative insertion's token lock while
//! a new row's index entries are written, as for INSERT ... ON CONFLICT):
//! - At READ COMMITTED a claim reads the key's latest version, committed or not
//!   (SnapshotDirty): one index descent tells what the key holds and whether another
//!   transaction is writing it. A replay, in_progress or mismatch needs no write. Another
//!   transaction inserting the key, or updating, deleting or locking it, means `in_progress` at
//!   once when the claim would have to write (a purge of an expired row is waited for instead:
//!   it is short and the key is as good as absent); only a version another transaction is
//!   inserting sends the claim to the committed version, through its snapshot, for the answer.
//!   At REPEATABLE READ and SERIALIZABLE the claim answers from its snapshot and reads the
//!   latest version only before it writes (a change committed after the snapshot is 40001).
//! - A new key is inserted speculatively with btree's partial unique check on the primary key:
//!   if another transaction inserted the key since it was read (running or committed), the row
//!   is killed at once (heap_abort_speculative: no session sees it from then on) and the claim reads the key again, so two claims never both hold it and
//!   neither waits. An existing row is updated without waiting (a holder that locks it first
//!   wins, and the claim answers `in_progress`).
//! - Every write leaves the row's xmin or xmax set to the transaction until it ends, which is
//!   how later claims see an attempt in flight, and how a transaction recognizes its own
//!   attempt: a claim never takes over an attempt its own transaction holds.
//! - Fenced operations wait for the row as UPDATE does; when a committed transaction changed
//!   it meanwhile, they read the key again and check the fence again (READ COMMITTED), or fail
//!   with 40001 (REPEATABLE READ, SERIALIZABLE), as the executor's UPDATE would.
//!
//! The files: `choice` (engine or SPI path, decided once per backend and again after every
//! invalidation of idem.keys), `rows` (key rows to datums and back, and the row this backend
//! last wrote), and `ops` (claim, consume, the fenced operations and forget).

mod choice;
mod ops;
mod rows;

use std::rc::Rc;

use pgrx::pg_sys;

use crate::pg::heap::{Layout, PrimaryKey, Table};
use crate::rules::key_row::MessageRows;
use crate::rules::row_write::Column;

pub use choice::{open, Opened};
pub use ops::{claim, consume, fenced, forget};

/// Attribute numbers of idem.keys' columns: the two that name a key, and each one a write sets.
#[derive(Clone, Copy)]
struct Columns {
    tenant: usize,
    key: usize,
    written: [usize; Column::ALL.len()],
}

impl Columns {
    fn resolve(table: &Table) -> Result<Columns, &'static str> {
        let a = |name: &str| table.attno(name).ok_or("a column of idem.keys is missing");
        let mut written = [0; Column::ALL.len()];
        for column in Column::ALL {
            written[column as usize] = a(column.name())?;
        }
        Ok(Columns {
            tenant: a("tenant")?,
            key: a("key")?,
            written,
        })
    }

    fn of(&self, column: Column) -> usize {
        self.written[column as usize]
    }
}

/// What this backend knows about idem.keys, until the next invalidation of it or of one of its
/// indexes: its layout (which indexes, their IndexInfo) and which of them is the primary key
/// are found again then, because a REINDEX CONCURRENTLY gives the primary key a new OID and
/// drops the old index, and the invalidation that says so arrives while the table is opened.
struct Catalog {
    fence_seq: pg_sys::Oid,
    rows: MessageRows,
    columns: Columns,
    layout: Rc<Layout>,
    primary_key: PrimaryKey,
}

/// idem.keys opened for the engine, with what the engine knows about it.
pub struct Keys {
    table: Table,
    catalog: Rc<Catalog>,
}

impl Keys {
    /// How this table stores a consumed message.
    pub fn message_rows(&self) -> MessageRows {
        self.catalog.rows
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// The decision is made again when idem.keys changes: a column of the DBA's sends every
    /// call to the SPI path, and dropping it brings the engine back, in the same backend.
    #[pg_test]
    fn the_decision_follows_changes_of_idem_keys() {
        assert!(
            matches!(super::open(), super::Opened::Engine(_)),
            "a plain idem.keys takes the engine"
        );
        Spi::run("ALTER TABLE idem.keys ADD COLUMN audited_at timestamptz").unwrap();
        assert!(
            matches!(super::open(), super::Opened::Spi(_)),
            "a column of the DBA's takes the SPI path"
        );
        Spi::run("ALTER TABLE idem.keys DROP COLUMN audited_at").unwrap();
        assert!(
            matches!(super::open(), super::Opened::Engine(_)),
            "and the engine is back once it is dropped"
        );
    }
}
