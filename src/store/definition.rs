//! What idem.keys must be for pg_idem to read and write it: its own columns exactly as
//! sql/schema.sql creates them. A DBA may change the table in two kinds of ways:
//!
//! - **Around pg_idem's columns** (a column added, a default, a trigger, a rule, row level
//!   security, a CHECK constraint, another index, a replica identity, a publication): pg_idem
//!   still knows what every value it reads and writes is, and the executor enforces the rest.
//!   The engine (`heap::Table`) then refuses the table and the SPI path writes it through the
//!   executor (`engine::open` decides, once per backend and again after every invalidation).
//! - **To pg_idem's own columns** (a type, a typmod, a collation, NOT NULL, identity or
//!   generation, a column dropped or renamed): what pg_idem reads would no longer be what it
//!   wrote (a datum of one type read as another, which can crash the server), so every call is
//!   refused with 55000 naming the column, until the change is undone.

use pgrx::pg_sys;

use crate::pg::heap::Column;
use crate::rules::key_row::MessageRows;

/// Whether one of pg_idem's columns may hold NULL.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Nulls {
    Never,
    Allowed,
    /// NOT NULL until 0.4.0; NULL in a message row since 0.5.0 (`MessageRows`). Either is
    /// recognised (a server runs the new library with the old schema until ALTER EXTENSION
    /// pg_idem UPDATE), and decides how messages are written: all such columns allow NULL, or
    /// none does.
    InMessageRows,
}

/// One of pg_idem's columns of idem.keys.
struct Expected {
    name: &'static str,
    type_oid: pg_sys::Oid,
    nulls: Nulls,
    /// the database's default collation for the text columns a caller names, "C" for key
    collation: pg_sys::Oid,
    /// another collation the column may have: tenant was "C" before 0.3.0, and a server runs
    /// the new library with the old schema until ALTER EXTENSION pg_idem UPDATE (both compare
    /// bytes, as the primary key needs)
    also: pg_sys::Oid,
}

const fn column(name: &'static str, type_oid: pg_sys::Oid, nulls: Nulls) -> Expected {
    Expected {
        name,
        type_oid,
        nulls,
        collation: pg_sys::InvalidOid,
        also: pg_sys::InvalidOid,
    }
}

const fn text(
    name: &'static str,
    nulls: Nulls,
    collation: pg_sys::Oid,
    also: pg_sys::Oid,
) -> Expected {
    Expected {
        name,
        type_oid: pg_sys::TEXTOID,
        nulls,
        collation,
        also,
    }
}

const DEFAULT: pg_sys::Oid = pg_sys::DEFAULT_COLLATION_OID;
const C: pg_sys::Oid = pg_sys::C_COLLATION_OID;

/// idem.keys as sql/schema.sql creates it (a table updated from 0.4.0 has another order).
const KEYS: [Expected; 15] = [
    column("purge_after", pg_sys::TIMESTAMPTZOID, Nulls::Never),
    column("fence", pg_sys::INT8OID, Nulls::InMessageRows),
    column("claimed_at", pg_sys::TIMESTAMPTZOID, Nulls::InMessageRows),
    column("expires_at", pg_sys::TIMESTAMPTZOID, Nulls::InMessageRows),
    column("ttl", pg_sys::INTERVALOID, Nulls::InMessageRows),
    column("state", pg_sys::CHAROID, Nulls::Never),
    text("tenant", Nulls::Never, DEFAULT, C),
    text("key", Nulls::Never, C, C),
    column("attempt", pg_sys::INT4OID, Nulls::InMessageRows),
    column("response_code", pg_sys::INT4OID, Nulls::Allowed),
    column("lease_expires_at", pg_sys::TIMESTAMPTZOID, Nulls::Allowed),
    column("request_hash", pg_sys::BYTEAOID, Nulls::InMessageRows),
    column("response_body", pg_sys::JSONBOID, Nulls::Allowed),
    text("checkpoint_phase", Nulls::Allowed, DEFAULT, DEFAULT),
    column("checkpoint_data", pg_sys::JSONBOID, Nulls::Allowed),
];

/// How idem.keys compares with what pg_idem created.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// pg_idem's columns exactly, and nothing else; messages are written as `MessageRows`.
    Exact(MessageRows),
    /// pg_idem's columns exactly, and columns of the DBA's besides (written by the executor,
    /// which fills in their defaults and checks their constraints).
    Extended(String, MessageRows),
    /// One of pg_idem's columns differs: the difference, for the error's detail.
    Changed(String),
}

/// Compares the live columns of idem.keys with pg_idem's.
pub fn compare(columns: &[Column]) -> Verdict {
    // how the columns that a message row leaves NULL were found: (name, NOT NULL)
    let mut message_columns = Vec::new();
    for expected in &KEYS {
        let Some(found) = columns.iter().find(|c| c.name == expected.name) else {
            return Verdict::Changed(format!(
                "Column {} is missing (dropped or renamed).",
                expected.name
            ));
        };
        if let Some(difference) = differs(expected, found) {
            return Verdict::Changed(difference);
        }
        if expected.nulls == Nulls::InMessageRows {
            message_columns.push((expected.name, found.not_null));
        }
    }
    let rows = if message_columns.iter().all(|&(_, not_null)| !not_null) {
        MessageRows::Narrow
    } else if message_columns.iter().all(|&(_, not_null)| not_null) {
        MessageRows::Whole
    } else {
        let list = |not_null: bool| {
            message_columns
                .iter()
                .filter(|c| c.1 == not_null)
                .map(|c| c.0)
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Verdict::Changed(format!(
            "Of the columns a message row leaves NULL, these are NOT NULL: {}; these allow NULL: \
             {}. pg_idem needs all six to allow NULL (as 0.5.0 creates them), or all to be NOT \
             NULL (0.4.0, until ALTER EXTENSION pg_idem UPDATE).",
            list(true),
            list(false)
        ));
    };
    let added: Vec<&str> = columns
        .iter()
        .filter(|c| !KEYS.iter().any(|e| e.name == c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !added.is_empty() {
        return Verdict::Extended(
            format!("it has columns of its own ({})", added.join(", ")),
            rows,
        );
    }
    if let Some(c) = columns.iter().find(|c| c.has_default) {
        return Verdict::Extended(format!("column {} has a default", c.name), rows);
    }
    Verdict::Exact(rows)
}

fn differs(expected: &Expected, found: &Column) -> Option<String> {
    let name = expected.name;
    if found.type_oid != expected.type_oid || found.typmod != -1 {
        return Some(format!(
            "Column {name} has type {}; pg_idem stores {} there.",
            type_name(found.type_oid, found.typmod),
            type_name(expected.type_oid, -1)
        ));
    }
    if found.collation != expected.collation && found.collation != expected.also {
        return Some(format!(
            "Column {name} has collation {}; pg_idem created it with {}.",
            collation_name(found.collation),
            collation_name(expected.collation)
        ));
    }
    match (expected.nulls, found.not_null) {
        (Nulls::Allowed, true) => {
            return Some(format!(
                "Column {name} is NOT NULL; pg_idem stores NULL there."
            ))
        }
        (Nulls::Never, false) => {
            return Some(format!(
                "Column {name} allows NULL; pg_idem relies on it being NOT NULL."
            ))
        }
        _ => {}
    }
    if found.generated {
        return Some(format!(
            "Column {name} is an identity or generated column; pg_idem writes its values itself."
        ));
    }
    None
}

fn type_name(type_oid: pg_sys::Oid, typmod: i32) -> String {
    // SAFETY: format_type_with_typemod returns a palloc'd name, "???" for an unknown type.
    unsafe {
        let name = pg_sys::format_type_with_typemod(type_oid, typmod);
        std::ffi::CStr::from_ptr(name)
            .to_string_lossy()
            .into_owned()
    }
}

fn collation_name(collation: pg_sys::Oid) -> String {
    if collation == pg_sys::InvalidOid {
        return "none".to_string();
    }
    // SAFETY: get_collation_name returns a palloc'd name, or NULL for an unknown collation.
    unsafe {
        let name = pg_sys::get_collation_name(collation);
        if name.is_null() {
            format!("{}", collation.to_u32())
        } else {
            format!("\"{}\"", std::ffi::CStr::from_ptr(name).to_string_lossy())
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    fn at<'a>(columns: &'a mut [Column], name: &str) -> &'a mut Column {
        columns.iter_mut().find(|c| c.name == name).unwrap()
    }

    fn created() -> Vec<Column> {
        KEYS.iter()
            .map(|e| Column {
                name: e.name.to_string(),
                type_oid: e.type_oid,
                typmod: -1,
                collation: e.collation,
                not_null: e.nulls == Nulls::Never,
                has_default: false,
                generated: false,
            })
            .collect()
    }

    #[pg_test]
    fn the_created_table_is_exact() {
        let relid = Spi::get_one::<pg_sys::Oid>("SELECT 'idem.keys'::regclass::oid")
            .unwrap()
            .unwrap();
        let columns = crate::pg::heap::columns_of(relid).unwrap();
        assert_eq!(compare(&columns), Verdict::Exact(MessageRows::Narrow));
        assert_eq!(columns, created());
    }

    #[pg_test]
    fn every_kind_of_change_is_told_apart() {
        let change = |f: &dyn Fn(&mut Vec<Column>)| {
            let mut columns = created();
            f(&mut columns);
            compare(&columns)
        };
        let changed = |v: Verdict| matches!(v, Verdict::Changed(_));
        let extended = |v: Verdict| matches!(v, Verdict::Extended(..));
        let exact = Verdict::Exact(MessageRows::Narrow);
        assert!(changed(change(
            &|c| at(c, "response_code").type_oid = pg_sys::NUMERICOID
        )));
        assert!(changed(change(&|c| {
            at(c, "tenant").type_oid = pg_sys::VARCHAROID;
            at(c, "tenant").typmod = 20;
        })));
        assert!(changed(change(&|c| at(c, "tenant").typmod = 20)));
        assert!(changed(change(&|c| at(c, "key").collation = DEFAULT)));
        assert!(changed(
            change(&|c| at(c, "checkpoint_phase").collation = C)
        ));
        // tenant as 0.1.0 and 0.2.0 created it, until ALTER EXTENSION pg_idem UPDATE
        assert_eq!(change(&|c| at(c, "tenant").collation = C), exact);
        assert!(changed(change(
            &|c| at(c, "lease_expires_at").not_null = true
        )));
        assert!(changed(change(&|c| at(c, "purge_after").not_null = false)));
        assert!(changed(change(&|c| at(c, "state").not_null = false)));
        // the columns a message row leaves NULL: NOT NULL all of them (0.4.0, until ALTER
        // EXTENSION pg_idem UPDATE: messages are written whole), or none; never some
        let message_columns = [
            "fence",
            "claimed_at",
            "expires_at",
            "ttl",
            "attempt",
            "request_hash",
        ];
        assert_eq!(
            change(&|c| message_columns
                .iter()
                .for_each(|name| at(c, name).not_null = true)),
            Verdict::Exact(MessageRows::Whole)
        );
        for name in message_columns {
            assert!(changed(change(&|c| at(c, name).not_null = true)));
        }
        assert!(changed(change(&|c| at(c, "attempt").generated = true)));
        assert!(changed(
            change(&|c| c.retain(|c| c.name != "response_body"))
        ));
        assert!(changed(change(
            &|c| at(c, "expires_at").name = "expires".into()
        )));
        assert!(extended(
            change(&|c| at(c, "expires_at").has_default = true)
        ));
        assert!(extended(change(&|c| {
            let mut added = at(c, "claimed_at").clone();
            added.name = "added_at".into();
            added.has_default = true;
            c.push(added);
        })));
        // the order of the columns does not matter (an upgraded table may have another)
        assert_eq!(
            change(&|c| {
                c.swap(0, 14);
            }),
            exact
        );
    }
}
