//! Every per-backend cache pg_idem keeps, what makes each stale, and the one set of invalidation
//! callbacks that says so. A pooled backend lives for days and sees DDL, grants and extension
//! upgrades go by: a cache that missed one would act on a table, a grant or a function that is
//! no longer there.
//!
//! The caches, by what they depend on (`Depends`):
//!
//! | cache                                   | where                   | stale after                      |
//! |-----------------------------------------|-------------------------|----------------------------------|
//! | table layouts (indexes, IndexInfo)      | `pg::heap::layout`      | `Relations`: the table or an index changed |
//! | engine or SPI path, or refused          | `store::engine::choice` | `Relations` (idem.keys), and a promotion |
//! | tenant grant answers, grants' OIDs      | `tenants::access`       | `TenantGrants`, `Roles`          |
//! | result row descriptors                  | `pg::datum`             | `Functions`: any pg_proc change  |
//! | prepared SPI plans                      | `pg::sql`               | nothing: PostgreSQL's plan cache revalidates them |
//! | the row this backend last wrote         | `store::engine::rows`   | nothing: checked on every use (`Table::fetch_own`) |
//! | SQL texts of the SPI path               | `store::spi`            | nothing: constant per shape      |
//! | SQL text of the purge's batch           | `store::purge`          | nothing: constant                |
//!
//! A cache reads `generation(d)` when it fills an entry and trusts the entry only while it has
//! not moved; the counters only ever grow. PostgreSQL delivers invalidations when a transaction
//! or command starts, and a backend's own changes at each command: when a change becomes
//! visible to a new statement anyway.

use std::cell::{Cell, RefCell};

use pgrx::pg_sys;

use crate::enum_list::enum_list;

enum_list! {
/// What a cache depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depends {
    /// The relations watched under it (`watch`): their relcache entries were invalidated (DDL,
    /// an index built, dropped or reindexed, a rule, a trigger, a policy, a publication, DROP
    /// EXTENSION). A reset of the whole relcache counts too.
    Relations,
    /// idem.tenant_grants or its primary key (any write to the grants committed: the table's
    /// statement trigger sends a relcache invalidation of it, `sql_api::tenants`; DROP
    /// EXTENSION, REINDEX, ALTER TABLE ... ENABLE TRIGGER after a restore that disabled them).
    TenantGrants,
    /// Role memberships and roles (GRANT/REVOKE role, ALTER ROLE ... [NO]INHERIT, DROP ROLE).
    Roles,
    /// Functions: a pg_proc row changed (ALTER EXTENSION UPDATE dropping and creating one).
    Functions,
}
}

thread_local! {
    static GENERATIONS: [Cell<u64>; Depends::ALL.len()] = const { [const { Cell::new(0) }; Depends::ALL.len()] };
    /// The relations watched, each under the dependency it moves.
    static WATCHED: RefCell<Vec<(pg_sys::Oid, Depends)>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

fn bump(depends: Depends) {
    GENERATIONS.with(|g| {
        let counter = &g[depends as usize];
        counter.set(counter.get() + 1);
    });
}

/// SAFETY: called by PostgreSQL's invalidation machinery with a relation OID (InvalidOid: the
/// whole relcache is reset); it only touches this backend's thread-locals, and neither raises
/// errors nor reads the catalogs.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid {
        // the whole relcache was reset: every dependency on relations moves
        bump(Depends::Relations);
        bump(Depends::TenantGrants);
        return;
    }
    // runs for every relation invalidated in this backend: no allocation, no other work
    WATCHED.with(|w| {
        for (_, depends) in w.borrow().iter().filter(|(watched, _)| *watched == relid) {
            bump(*depends);
        }
    });
}

/// SAFETY: called by PostgreSQL's invalidation machinery with the id of the syscache whose
/// entries changed; it only touches this backend's thread-locals.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_syscache_invalidation(arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    bump(Depends::ALL[arg.value()]);
}

/// Registers the callbacks, once per backend (PostgreSQL keeps at most a few dozen per backend,
/// so registering per use would run out).
fn register() {
    if REGISTERED.with(Cell::get) {
        return;
    }
    // SAFETY: registered once per backend (the flag); the callbacks only count, in this
    // backend's thread-locals, and never raise errors or touch the catalogs. The argument is the
    // index of the dependency each syscache moves.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(
            Some(on_relcache_invalidation),
            pg_sys::Datum::from(0),
        );
        for (cache, depends) in [
            (pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM, Depends::Roles),
            (pg_sys::SysCacheIdentifier::AUTHOID, Depends::Roles),
            (pg_sys::SysCacheIdentifier::PROCOID, Depends::Functions),
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(on_syscache_invalidation),
                pg_sys::Datum::from(depends as usize),
            );
        }
    }
    REGISTERED.with(|r| r.set(true));
}

/// The generation of `depends`: an entry filled at one generation is stale at another.
pub fn generation(depends: Depends) -> u64 {
    register();
    GENERATIONS.with(|g| g[depends as usize].get())
}

/// Moves `depends` whenever one of `relids` is invalidated from now on.
pub fn watch(depends: Depends, relids: impl IntoIterator<Item = pg_sys::Oid>) {
    register();
    WATCHED.with(|w| {
        let mut w = w.borrow_mut();
        for relid in relids {
            if !w.contains(&(relid, depends)) {
                w.push((relid, depends));
            }
        }
    });
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    fn oid_of(relation: &str) -> pg_sys::Oid {
        Spi::get_one_with_args::<pg_sys::Oid>(
            "SELECT $1::pg_catalog.regclass::pg_catalog.oid",
            &[relation.into()],
        )
        .unwrap()
        .unwrap()
    }

    /// Runs `sql` and says which generations it moved.
    fn moved_by(sql: &str) -> Vec<Depends> {
        let before = Depends::ALL.map(generation);
        Spi::run(sql).unwrap();
        Depends::ALL
            .into_iter()
            .filter(|d| generation(*d) != before[*d as usize])
            .collect()
    }

    /// Each dependency moves on the event that makes its caches stale, and a change elsewhere
    /// moves none of them.
    #[pg_test]
    fn each_dependency_moves_on_its_own_events() {
        Spi::run("CREATE TABLE cached_elsewhere (a int)").unwrap();
        watch(Depends::Relations, [oid_of("idem.keys")]);
        watch(
            Depends::TenantGrants,
            [
                oid_of("idem.tenant_grants"),
                oid_of("idem.tenant_grants_pkey"),
            ],
        );
        assert_eq!(
            moved_by("ALTER TABLE cached_elsewhere ADD COLUMN b int"),
            []
        );
        assert_eq!(
            moved_by("ALTER TABLE idem.keys SET (fillfactor = 90)"),
            [Depends::Relations]
        );
        assert_eq!(
            moved_by("CREATE INDEX ON idem.keys (claimed_at)"),
            [Depends::Relations]
        );
        assert_eq!(moved_by("CREATE ROLE cached_role"), [Depends::Roles]);
        assert_eq!(moved_by("CREATE ROLE cached_group"), [Depends::Roles]);
        assert_eq!(
            moved_by("GRANT cached_group TO cached_role"),
            [Depends::Roles]
        );
        // a row written by hand is announced too (the table's statement trigger), at the
        // backend's next command
        assert_eq!(
            moved_by("INSERT INTO idem.tenant_grants VALUES ('cached_role', 't'); SELECT 1"),
            [Depends::TenantGrants]
        );
        assert_eq!(
            moved_by("DELETE FROM idem.tenant_grants; SELECT 1"),
            [Depends::TenantGrants]
        );
        // a read announces nothing
        assert_eq!(moved_by("SELECT count(*) FROM idem.tenant_grants"), []);
        // what a grant through the API sends (`tenants::announce_change`)
        let grants = oid_of("idem.tenant_grants");
        let before = Depends::ALL.map(generation);
        // SAFETY: queues a relcache invalidation of an existing relation in this transaction.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(grants) };
        // the backend's own invalidations are applied at its next command
        // SAFETY: advances the command counter of this transaction, as every statement does.
        unsafe { pg_sys::CommandCounterIncrement() };
        let moved: Vec<Depends> = Depends::ALL
            .into_iter()
            .filter(|d| generation(*d) != before[*d as usize])
            .collect();
        assert_eq!(moved, [Depends::TenantGrants]);
        assert_eq!(
            moved_by("CREATE FUNCTION cached_f() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
            [Depends::Functions]
        );
    }
}
