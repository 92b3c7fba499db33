//! Helpers of the in-server tests (the `mod tests` of each SQL module). Each #[pg_test] runs
//! inside one transaction that is rolled back afterwards; behaviour across sessions is tested
//! through real client connections in tests/.

use pgrx::prelude::*;

/// A PL/pgSQL wrapper that runs a statement in a subtransaction and returns its SQLSTATE
/// ('00000' when it succeeded), so that one test can check many errors.
pub fn sqlstate_of(sql: &str) -> String {
    Spi::run(
        "CREATE OR REPLACE FUNCTION pg_temp.sqlstate_of(statement text) RETURNS text LANGUAGE plpgsql AS $f$
         BEGIN EXECUTE statement; RETURN '00000';
         EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE; END $f$",
    )
    .expect("create sqlstate_of");
    Spi::get_one_with_args::<String>("SELECT pg_temp.sqlstate_of($1)", &[sql.into()])
        .expect("sqlstate_of")
        .unwrap_or_default()
}

pub fn one_text(sql: &str) -> Option<String> {
    Spi::get_one::<String>(sql).expect(sql)
}

pub fn one_i64(sql: &str) -> Option<i64> {
    Spi::get_one::<i64>(sql).expect(sql)
}

/// What idem_claim answered, as the in-server tests look at it.
pub struct Answer {
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
}

/// Claims `key` through idem_claim, as a caller would.
pub fn claim(tenant: &str, key: &str, hash: &str) -> Answer {
    Spi::connect(|c| {
        let row = c
            .select(
                "SELECT outcome, fence, attempt FROM idem_claim($1, $2, $3)",
                None,
                &[tenant.into(), key.into(), hash.into()],
            )?
            .first();
        Ok::<_, pgrx::spi::Error>(Answer {
            outcome: row.get::<String>(1)?.unwrap_or_default(),
            fence: row.get::<i64>(2)?,
            attempt: row.get::<i32>(3)?,
        })
    })
    .expect("idem_claim")
}
