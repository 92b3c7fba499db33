//! Which back-end writes idem.keys: the engine, when `heap::Table` can write it as the executor
//! would, or else the SPI path; decided once per backend and again after every invalidation of
//! idem.keys. Apart from the rows and operations, which only run once the engine is chosen.

use std::cell::RefCell;
use std::rc::Rc;

use pgrx::pg_sys;

use super::{Catalog, Columns, Keys};
use crate::errors;
use crate::pg::caches::{self, Depends};
use crate::pg::heap::{Layout, Table};
use crate::rules::key_row::MessageRows;
use crate::store::definition::{self, Verdict};

/// The decision of this backend, until the next invalidation of idem.keys.
enum Choice {
    Undecided,
    /// The SPI path (`store::spi`); `on_standby`: decided during recovery, so decided again
    /// once this server is promoted.
    Spi {
        on_standby: bool,
        rows: MessageRows,
    },
    Engine(Rc<Catalog>),
    /// One of pg_idem's own columns was changed: every call is refused (`definition`).
    Refused(String),
}

thread_local! {
    /// The decision, and the generation of `Depends::Relations` it was made at: idem.keys or one
    /// of its indexes changed since, or the relcache was reset, and it is made again.
    static CHOICE: RefCell<(u64, Choice)> = const { RefCell::new((0, Choice::Undecided)) };
}

fn oid_by_name(namespace: pg_sys::Oid, name: &std::ffi::CStr) -> pg_sys::Oid {
    // SAFETY: a syscache look-up by a NUL-terminated name; InvalidOid when missing.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), namespace) }
}

/// Which back-end writes idem.keys for this call.
pub enum Opened {
    Engine(Keys),
    /// the SPI path, writing messages this way
    Spi(MessageRows),
}

/// Opens idem.keys for the engine path, or says that the SPI path must run; raises 55000
/// when one of pg_idem's own columns was changed.
pub fn open() -> Opened {
    // SAFETY: a plain read of shared state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    let generation = caches::generation(Depends::Relations);
    let cached = CHOICE.with(|c| match &*c.borrow() {
        (decided, _) if *decided != generation => None,
        (_, Choice::Undecided) => None,
        (_, Choice::Spi { on_standby, .. }) if *on_standby && !standby => None,
        (_, Choice::Spi { rows, .. }) => Some(Err(*rows)),
        (_, Choice::Engine(catalog)) => Some(Ok(catalog.clone())),
        (_, Choice::Refused(difference)) => errors::keys_table_changed(difference).raise(),
    });
    match cached {
        Some(Err(rows)) => Opened::Spi(rows),
        // what changed since the decision was made (the invalidation arrives while the table
        // is opened) is decided again
        Some(Ok(catalog)) => match Table::open(&catalog.layout) {
            Ok(table) => Opened::Engine(Keys { table, catalog }),
            Err(_) => decide(standby),
        },
        None => decide(standby),
    }
}

/// Why the engine does not write idem.keys, or that it does.
enum Decision {
    Engine(Keys),
    /// why, and how messages are written
    Spi(String, MessageRows),
    Refused(String),
}

/// How messages are written when idem.keys could not even be read (missing, dropped): whole
/// rows are valid under every schema; the statement then fails as the executor decides.
const UNKNOWN_ROWS: MessageRows = MessageRows::Whole;

fn decide(standby: bool) -> Opened {
    // read before the look-up: an invalidation that arrives during it leaves the decision stale
    let generation = caches::generation(Depends::Relations);
    let (choice, opened) = match look_up(standby) {
        Decision::Engine(keys) => (Choice::Engine(keys.catalog.clone()), Opened::Engine(keys)),
        Decision::Spi(why, rows) => {
            pgrx::debug1!("pg_idem: idem.keys takes the SPI path (through the executor): {why}");
            (
                Choice::Spi {
                    on_standby: standby,
                    rows,
                },
                Opened::Spi(rows),
            )
        }
        Decision::Refused(difference) => {
            CHOICE.with(|c| *c.borrow_mut() = (generation, Choice::Refused(difference.clone())));
            errors::keys_table_changed(&difference).raise()
        }
    };
    CHOICE.with(|c| *c.borrow_mut() = (generation, choice));
    opened
}

fn look_up(standby: bool) -> Decision {
    // SAFETY: a catalog look-up by name; a missing schema gives InvalidOid (missing_ok).
    let namespace = unsafe { pg_sys::get_namespace_oid(c"idem".as_ptr(), true) };
    let relid = oid_by_name(namespace, c"keys");
    let fence_seq = oid_by_name(namespace, c"fence_seq");
    if [relid, fence_seq].contains(&pg_sys::InvalidOid) {
        return Decision::Spi(
            "idem.keys or idem.fence_seq is missing".into(),
            UNKNOWN_ROWS,
        );
    }
    caches::watch(Depends::Relations, [relid]);
    // pg_idem's own columns first, whichever path writes: no datum of another type is ever
    // read or written as one of them
    let Some(columns) = crate::pg::heap::columns_of(relid) else {
        return Decision::Spi("it was dropped".into(), UNKNOWN_ROWS);
    };
    let rows = match definition::compare(&columns) {
        Verdict::Changed(difference) => return Decision::Refused(difference),
        Verdict::Extended(_, rows) if standby => rows,
        Verdict::Extended(why, rows) => return Decision::Spi(why, rows),
        Verdict::Exact(rows) => rows,
    };
    if standby {
        // a hot standby: claims only read there, and table_open's RowExclusiveLock is refused
        return Decision::Spi("this server is a hot standby".into(), rows);
    }
    if crate::pg::cluster::citus_installed() {
        return Decision::Spi(
            "Citus is installed, and must plan every statement on idem.keys".into(),
            rows,
        );
    }
    let (layout, table) = match Layout::load(relid) {
        Ok(loaded) => loaded,
        Err(why) => return Decision::Spi(why.into(), rows),
    };
    let columns = match Columns::resolve(&table) {
        Ok(columns) => columns,
        Err(why) => return Decision::Spi(why.into(), rows),
    };
    let Some(primary_key) = layout.primary_key(&table, &[columns.tenant, columns.key]) else {
        return Decision::Spi("it has no valid primary key on (tenant, key)".into(), rows);
    };
    Decision::Engine(Keys {
        table,
        catalog: Rc::new(Catalog {
            fence_seq,
            rows,
            columns,
            layout,
            primary_key,
        }),
    })
}
