//! Every direction keeps every key: native to the SQL edition (plain or through pg_tle) and
//! back, pg_idem's rows alone or a whole database.

use super::moving::*;
use super::*;

#[test]
fn native_to_the_plain_sql_edition() {
    let source = Side::native(Install::Installed);
    let target = Side::plain();
    rows_move(&source, &target);
}

#[test]
fn native_to_the_sql_edition_through_pg_tle() {
    let source = Side::native(Install::Installed);
    let Some(target) = Side::tle(Install::Installed) else {
        return;
    };
    rows_move(&source, &target);
}

#[test]
fn the_plain_sql_edition_to_native() {
    let source = Side::plain();
    let target = Side::native(Install::Installed);
    rows_move(&source, &target);
}

#[test]
fn the_sql_edition_through_pg_tle_to_native() {
    let Some(source) = Side::tle(Install::Installed) else {
        return;
    };
    let target = Side::native(Install::Installed);
    rows_move(&source, &target);
}

/// The whole database, the application's tables with it, into a managed-style server where
/// pg_idem is registered with pg_tle: restored by app_admin, no superuser.
#[test]
fn a_whole_native_database_to_pg_tle() {
    let source = Side::native(Install::Installed);
    let Some(target) = Side::tle(Install::Bare) else {
        return;
    };
    let before = populate(&source, true);
    move_database_to_tle(&source, &target);
    check_target(&target, &before, 0);
    let amount: String = target
        .user()
        .query_one(
            "SELECT amount::text FROM public.orders WHERE key = 'done'",
            &[],
        )
        .expect("the business row moved with its key")
        .get(0);
    assert_eq!(amount, "99.90");
}

/// The whole database of a managed-style server, pg_tle and the settings left out, into a new
/// database of a native server.
#[test]
fn a_whole_pg_tle_database_to_native() {
    let Some(source) = Side::tle(Install::Installed) else {
        return;
    };
    let target = Side::native(Install::Bare);
    let before = populate(&source, true);
    move_database_from_tle(&source, &target);
    check_target(&target, &before, 0);
    let amount: String = target
        .user()
        .query_one(
            "SELECT amount::text FROM public.orders WHERE key = 'done'",
            &[],
        )
        .expect("the business row moved with its key")
        .get(0);
    assert_eq!(amount, "99.90");
}

/// Why the rows are dumped with `--table='idem.*'`: natively (as through pg_tle) idem's tables
/// belong to the extension, and `--schema=idem` dumps none of their rows.
#[test]
fn schema_idem_dumps_no_row_of_the_extension() {
    let source = Side::native(Install::Installed);
    let mut db = source.user();
    claim_fence(&mut db, "t1", "k", "1 minute", "1 day");
    let dump = |pattern: &str| {
        let mut args = source.conn("postgres");
        args.extend(["--data-only".to_string(), pattern.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ok("pg_dump", source.run_bin("pg_dump", &args))
    };
    assert!(!dump("--schema=idem").contains("COPY idem.keys"));
    assert!(dump("--table=idem.*").contains("COPY idem.keys"));
}
