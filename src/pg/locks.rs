//! pg_idem's heavyweight locks, in one place: the advisory lock spaces it uses and the tags built
//! in them, so that no two of its locks (and none of the application's) can ever share a tag.
//!
//! An advisory lock tag is (database, two 32-bit words, space): `pg_advisory_lock(bigint)` uses
//! space 1 and `pg_advisory_lock(int, int)` space 2; pg_idem's spaces are numbers no SQL
//! function can produce, and they show in pg_locks as `objsubid`.

use pgrx::pg_sys;

/// The advisory lock spaces of pg_idem (pg_locks.objsubid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
enum Space {
    /// One lock per key, taken by whoever writes the key on the SPI path (478).
    Key = 0x1de,
    /// One lock per database, held while its fence floor is raised (479).
    FenceFloor = 0x1df,
}

/// A transaction-scoped exclusive advisory lock of pg_idem's, in this database.
pub struct Lock {
    tag: pg_sys::LOCKTAG,
}

/// What taking a lock gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Another transaction holds it (only when not waiting).
    Busy,
    /// Taken now: it may be given back before the end of the transaction with `release`.
    Now,
    /// This transaction held it already.
    AlreadyHeld,
}

const MODE: pg_sys::LOCKMODE = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;

impl Lock {
    fn new(space: Space, id: u64) -> Lock {
        Lock {
            tag: pg_sys::LOCKTAG {
                // SAFETY: MyDatabaseId is set once the backend is connected to a database,
                // before any SQL function can run, and never changes afterwards.
                locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
                locktag_field2: (id >> 32) as u32,
                locktag_field3: id as u32,
                locktag_field4: space as u16,
                locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
                locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
            },
        }
    }

    /// The lock of one key (`id`: `hashing::key_lock_id` of its tenant and key).
    pub fn key(id: u64) -> Lock {
        Lock::new(Space::Key, id)
    }

    /// The lock of this database's fence floor.
    pub fn fence_floor() -> Lock {
        Lock::new(Space::FenceFloor, 0)
    }

    /// Takes the lock if nobody else holds it, without waiting.
    pub fn try_take(&self) -> Taken {
        // SAFETY: a valid advisory lock tag; dontWait = true never blocks; a transaction lock
        // (sessionLock = false), released at the end of the transaction or by `release`.
        match unsafe { pg_sys::LockAcquire(&self.tag, MODE, false, true) } {
            pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => Taken::Busy,
            pg_sys::LockAcquireResult::LOCKACQUIRE_OK => Taken::Now,
            _ => Taken::AlreadyHeld,
        }
    }

    /// Takes the lock, waiting for whoever holds it (interruptible, bounded by lock_timeout and
    /// statement_timeout, deadlock-checked by the lock manager).
    pub fn take(&self) -> Taken {
        // SAFETY: a valid advisory lock tag; a transaction lock (sessionLock = false).
        match unsafe { pg_sys::LockAcquire(&self.tag, MODE, false, false) } {
            pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD => Taken::AlreadyHeld,
            _ => Taken::Now,
        }
    }

    /// Gives the lock back before the end of the transaction if `taken` says this call took it.
    pub fn release(&self, taken: Taken) {
        if taken == Taken::Now {
            // SAFETY: releases a lock this transaction took (Taken::Now), same tag and mode.
            unsafe {
                pg_sys::LockRelease(&self.tag, MODE, false);
            }
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    /// Two of pg_idem's locks never share a tag: their spaces differ from each other and from
    /// the spaces of pg_advisory_lock (1 and 2), and a key lock shows in pg_locks in its space.
    #[pg_test]
    fn the_spaces_are_apart_from_each_other_and_from_sql_advisory_locks() {
        let (key, floor) = (Lock::key(0), Lock::fence_floor());
        assert_eq!(
            (key.tag.locktag_field2, key.tag.locktag_field3),
            (floor.tag.locktag_field2, floor.tag.locktag_field3)
        );
        assert_ne!(key.tag.locktag_field4, floor.tag.locktag_field4);
        assert!([key.tag.locktag_field4, floor.tag.locktag_field4]
            .iter()
            .all(|space| *space > 2));
        // an id no other test's key hashes to in practice; other sessions may hold the floor lock
        let key = Lock::key(0xfeed_0000_0000_0001);
        assert_eq!(key.try_take(), Taken::Now);
        assert_eq!(key.try_take(), Taken::AlreadyHeld);
        let shown = Spi::get_one::<i64>(
            "SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks \
             WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() \
               AND objsubid = 478 AND classid = 4276944896::pg_catalog.oid AND objid = 1",
        );
        assert_eq!(shown, Ok(Some(1)));
        key.release(Taken::Now);
    }
}
