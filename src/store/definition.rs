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

/// One of pg_idem's columns of idem.keys.
struct Expected {
    name: &'static str,
    type_oid: pg_sys::Oid,
    not_null: bool,
    /// the database's default collation for the text columns a caller names, "C" for key
    collation: pg_sys::Oid,
    /// another collation the column may have: tenant was "C" before 0.3.0, and a server runs
    /// the new library with the old schema until ALTER EXTENSION pg_idem UPDATE (both compare
    /// bytes, as the primary key needs)
    also: pg_sys::Oid,
}

const fn column(name: &'static str, type_oid: pg_sys::Oid, not_null: bool) -> Expected {
    Expected {
        name,
        type_oid,
        not_null,
        collation: pg_sys::InvalidOid,
        also: pg_sys::InvalidOid,
    }
}

const fn text(
    name: &'static str,
    not_null: bool,
    collation: pg_sys::Oid,
    also: pg_sys::Oid,
) -> Expected {
    Expected {
        name,
        type_oid: pg_sys::TEXTOID,
        not_null,
        collation,
        also,
    }
}

const DEFAULT: pg_sys::Oid = pg_sys::DEFAULT_COLLATION_OID;
const C: pg_sys::Oid = pg_sys::C_COLLATION_OID;

/// idem.keys as sql/schema.sql creates it (and the upgrade scripts leave it).
const KEYS: [Expected; 15] = [
    column("fence", pg_sys::INT8OID, true),
    column("claimed_at", pg_sys::TIMESTAMPTZOID, true),
    column("lease_expires_at", pg_sys::TIMESTAMPTZOID, false),
    column("expires_at", pg_sys::TIMESTAMPTZOID, true),
    column("purge_after", pg_sys::TIMESTAMPTZOID, true),
    column("ttl", pg_sys::INTERVALOID, true),
    column("attempt", pg_sys::INT4OID, true),
    column("response_code", pg_sys::INT4OID, false),
    column("state", pg_sys::CHAROID, true),
    text("tenant", true, DEFAULT, C),
    text("key", true, C, C),
    column("request_hash", pg_sys::BYTEAOID, true),
    column("response_body", pg_sys::JSONBOID, false),
    text("checkpoint_phase", false, DEFAULT, DEFAULT),
    column("checkpoint_data", pg_sys::JSONBOID, false),
];

/// How idem.keys compares with what pg_idem created.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// pg_idem's columns exactly, and nothing else.
    Exact,
    /// pg_idem's columns exactly, and columns of the DBA's besides (written by the executor,
    /// which fills in their defaults and checks their constraints).
    Extended(String),
    /// One of pg_idem's columns differs: the difference, for the error's detail.
    Changed(String),
}

/// Compares the live columns of idem.keys with pg_idem's.
pub fn compare(columns: &[Column]) -> Verdict {
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
    }
    let added: Vec<&str> = columns
        .iter()
        .filter(|c| !KEYS.iter().any(|e| e.name == c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !added.is_empty() {
        return Verdict::Extended(format!("it has columns of its own ({})", added.join(", ")));
    }
    if let Some(c) = columns.iter().find(|c| c.has_default) {
        return Verdict::Extended(format!("column {} has a default", c.name));
    }
    Verdict::Exact
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
    if found.not_null != expected.not_null {
        let (now, was) = if found.not_null {
            ("is NOT NULL", "pg_idem stores NULL there")
        } else {
            ("allows NULL", "pg_idem relies on it being NOT NULL")
        };
        return Some(format!("Column {name} {now}; {was}."));
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

    fn created() -> Vec<Column> {
        KEYS.iter()
            .map(|e| Column {
                name: e.name.to_string(),
                type_oid: e.type_oid,
                typmod: -1,
                collation: e.collation,
                not_null: e.not_null,
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
        assert_eq!(compare(&columns), Verdict::Exact);
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
        let extended = |v: Verdict| matches!(v, Verdict::Extended(_));
        assert!(changed(change(&|c| c[7].type_oid = pg_sys::NUMERICOID)));
        assert!(changed(change(&|c| {
            c[9].type_oid = pg_sys::VARCHAROID;
            c[9].typmod = 20;
        })));
        assert!(changed(change(&|c| c[9].typmod = 20)));
        assert!(changed(change(&|c| c[10].collation = DEFAULT)));
        assert!(changed(change(&|c| c[13].collation = C)));
        // tenant as 0.1.0 and 0.2.0 created it, until ALTER EXTENSION pg_idem UPDATE
        assert_eq!(change(&|c| c[9].collation = C), Verdict::Exact);
        assert!(changed(change(&|c| c[2].not_null = true)));
        assert!(changed(change(&|c| c[0].not_null = false)));
        assert!(changed(change(&|c| c[6].generated = true)));
        assert!(changed(change(&|c| {
            c.remove(12);
        })));
        assert!(changed(change(&|c| c[3].name = "expires".into())));
        assert!(extended(change(&|c| c[3].has_default = true)));
        assert!(extended(change(&|c| {
            let mut added = c[1].clone();
            added.name = "added_at".into();
            added.has_default = true;
            c.push(added);
        })));
        // the order of the columns does not matter (an upgraded table may have another)
        assert_eq!(
            change(&|c| {
                c.swap(0, 14);
            }),
            Verdict::Exact
        );
    }
}
