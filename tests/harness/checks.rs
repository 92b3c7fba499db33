//! Storage checks (amcheck) and the superuser connections they need.

use crate::*;

/// When `db`'s role is not a superuser ([`dba_role`] in a `sql-tle` run): a connection as the
/// superuser to the same server and database, for what only the service may look at; None
/// when `db` may do it itself.
pub fn superuser_twin(db: &mut Client) -> Option<Client> {
    let row = db
        .query_one(
            "SELECT r.rolsuper, pg_catalog.current_setting('port'), pg_catalog.current_database()::text \
               FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user",
            &[],
        )
        .expect("who the connection is");
    if row.get::<_, bool>(0) {
        return None;
    }
    let (port, dbname): (String, String) = (row.get(1), row.get(2));
    let port: u16 = port.parse().expect("the server's port");
    Some(
        connect_seeded(&conninfo_for(port, "postgres", &dbname))
            .unwrap_or_else(|e| panic!("connect to {dbname} as the superuser: {e}")),
    )
}

/// How a test connects to a server on 127.0.0.1 as `role`: a statement that hangs fails its
/// test after a minute instead of hanging the suite.
pub(crate) fn conninfo_for(port: u16, role: &str, dbname: &str) -> String {
    format!(
        "host=127.0.0.1 port={port} user={role} dbname={dbname} connect_timeout=10 options='-c statement_timeout=60s'"
    )
}

/// Checks pg_idem's tables the way PostgreSQL checks its own storage (amcheck): every heap page
/// and TOAST value of idem.keys, idem.watermarks and idem.tenant_grants (`verify_heapam`), and
/// every index on them, which must be valid, with `bt_index_parent_check(heapallindexed)`: each
/// index entry in its place, and an entry for every heap tuple. Panics with what amcheck found.
/// In a `sql-tle` run the checks run as the superuser (the service's side: amcheck is theirs
/// to run, not the customer's), in the database `db` is connected to.
pub fn amcheck(db: &mut Client) {
    let mut checker = superuser_twin(db);
    let db = checker.as_mut().unwrap_or(db);
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .expect("CREATE EXTENSION amcheck");
    for table in ["idem.keys", "idem.watermarks", "idem.tenant_grants"] {
        let corrupt: Vec<String> = db
            .query(
                "SELECT format('block %s, offset %s, attribute %s: %s', v.blkno, v.offnum, v.attnum, v.msg) \
                   FROM verify_heapam($1::text::regclass, check_toast => true) AS v",
                &[&table],
            )
            .unwrap_or_else(|e| panic!("verify_heapam({table}): {e:?}"))
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            corrupt.is_empty(),
            "verify_heapam({table}):\n{}",
            corrupt.join("\n")
        );
        let indexes: Vec<(String, bool)> = db
            .query(
                "SELECT i.indexrelid::regclass::text, i.indisvalid FROM pg_index AS i \
                  WHERE i.indrelid = $1::text::regclass ORDER BY 1",
                &[&table],
            )
            .expect("the indexes of a pg_idem table")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for (index, valid) in indexes {
            assert!(
                valid,
                "{index} is not valid (a failed CREATE INDEX or REINDEX CONCURRENTLY left it)"
            );
            db.execute(
                "SELECT bt_index_parent_check($1::text::regclass, heapallindexed => true)",
                &[&index],
            )
            .unwrap_or_else(|e| panic!("bt_index_parent_check({index}): {e:?}"));
        }
    }
}
