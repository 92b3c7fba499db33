//! Calling pg_idem and PostgreSQL from a test: claims, completions, SQLSTATEs, first
//! columns, composite values, waiting for a condition.

use std::time::{Duration, Instant};

use crate::*;

/// The SQLSTATE of a failed statement ("" when the error did not come from the server).
pub fn sqlstate(error: &postgres::Error) -> String {
    error
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_default()
}

/// Every function that takes a tenant, called on tenant `$T` (and key 'k', fence 1): the list
/// the tenant-grant suites (tests/attacks/tenant_grants.rs, and sql_edition_security's
/// tenants) run on a tenant the role may not act on.
pub const TENANT_CALLS: &[&str] = &[
    "SELECT * FROM idem_claim('$T', 'k', 'h')",
    "SELECT * FROM idem_claim_many('$T', ARRAY['k'], ARRAY['h'])",
    "SELECT idem_complete('$T', 'k', 1, 200)",
    "SELECT idem_fail_final('$T', 'k', 1, 500)",
    "SELECT idem_release('$T', 'k', 1)",
    "SELECT idem_heartbeat('$T', 'k', 1)",
    "SELECT idem_forget('$T', 'k')",
    "SELECT idem_checkpoint('$T', 'k', 1, 'p')",
    "SELECT idem_assert_fence('$T', 'k', 1)",
    "SELECT * FROM idem_claim_seq('$T', 's', 1)",
    "SELECT idem_watermark('$T', 's')",
    "SELECT idem_reset_watermark('$T', 's', 0)",
    "SELECT idem_consume('$T', 'm')",
    "SELECT * FROM idem_consume_many('$T', ARRAY['m'])",
    "SELECT * FROM idem_complete_many('$T', ARRAY['k'], ARRAY[1::bigint], ARRAY[200])",
];

/// Waits until `condition` holds, polling; panics with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every row of idem.keys as text, in key order: for comparing the whole store before and after.
/// Each row is a jsonb object, whose keys are the column names in jsonb's own order: the same for
/// tables whose columns are in different orders (an updated one and a fresh install's).
pub fn all_keys(db: &mut Client) -> Vec<String> {
    db.column(
        "SELECT pg_catalog.to_jsonb(k)::text FROM idem.keys k ORDER BY tenant, key",
        &[],
    )
}

/// One row of idem_claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    /// response_body as jsonb text
    pub response_body: Option<String>,
    pub checkpoint_phase: Option<String>,
    pub checkpoint_data: Option<String>,
}

pub(crate) const CLAIM_SQL: &str = "SELECT outcome, fence, attempt, response_code, response_body::text, \
     checkpoint_phase, checkpoint_data::text FROM idem_claim($1, $2, $3, $4::text::interval, $5::text::interval)";

pub(crate) fn claim_from_row(row: &postgres::Row) -> Claim {
    Claim {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        response_code: row.get(3),
        response_body: row.get(4),
        checkpoint_phase: row.get(5),
        checkpoint_data: row.get(6),
    }
}

/// The first column of every row a query returns (a list of texts, numbers, ...), for any
/// `postgres::GenericClient` (a Client or a Transaction); panics naming the query when it fails.
pub trait Column {
    fn column<T: for<'a> postgres::types::FromSql<'a>>(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Vec<T>;
}

impl<C: GenericClient> Column for C {
    fn column<T: for<'a> postgres::types::FromSql<'a>>(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Vec<T> {
        self.query(sql, params)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

/// idem_claim with optional lease and ttl (as interval text such as "100 ms").
pub fn try_claim(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: Option<&str>,
    ttl: Option<&str>,
) -> Result<Claim, postgres::Error> {
    db.query_one(CLAIM_SQL, &[&tenant, &key, &hash, &lease, &ttl])
        .map(|r| claim_from_row(&r))
}

pub fn claim(db: &mut impl GenericClient, tenant: &str, key: &str, hash: &str) -> Claim {
    try_claim(db, tenant, key, hash, None, None).expect("idem_claim")
}

pub fn claim_with(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: &str,
    ttl: Option<&str>,
) -> Claim {
    try_claim(db, tenant, key, hash, Some(lease), ttl).expect("idem_claim")
}

pub fn try_complete(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    fence: i64,
    code: i32,
    body: &str,
) -> Result<(), postgres::Error> {
    db.query_one(
        "SELECT idem_complete($1, $2, $3, $4, $5::text::jsonb)",
        &[&tenant, &key, &fence, &code, &body],
    )
    .map(|_| ())
}

pub fn complete(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    fence: i64,
    code: i32,
    body: &str,
) {
    try_complete(db, tenant, key, fence, code, body).expect("idem_complete")
}

/// The fields of a composite value in PostgreSQL's text form, `(a,"b c",,...)`; None for an
/// empty (NULL) field.
pub fn record_fields(text: &str) -> Vec<Option<String>> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a record: {text}"));
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut was_quoted = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '"' => {
                quoted = !quoted;
                was_quoted = true;
            }
            ',' if !quoted => {
                fields.push(if current.is_empty() && !was_quoted {
                    None
                } else {
                    Some(std::mem::take(&mut current))
                });
                was_quoted = false;
            }
            c => current.push(c),
        }
    }
    fields.push(if current.is_empty() && !was_quoted {
        None
    } else {
        Some(current)
    });
    fields
}

/// The first column of the first row of a simple-protocol query, as text.
pub fn simple_one(db: &mut Client, sql: &str) -> Result<Option<String>, postgres::Error> {
    for message in db.simple_query(sql)? {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            return Ok(row.get(0).map(str::to_string));
        }
    }
    Ok(None)
}

/// Every row of a simple-protocol query (several statements allowed), each column as text. On
/// an error, one more round trip before returning it: the error reaches the client before the
/// server has rolled the statement back and let its locks go, and an empty query waits for
/// that, so that the next statement (in another session, perhaps) does not meet them.
pub fn simple_rows(
    db: &mut Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, postgres::Error> {
    match db.simple_query(sql) {
        Ok(messages) => Ok(messages
            .iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_string))
                        .collect(),
                ),
                _ => None,
            })
            .collect()),
        Err(e) => {
            let _ = db.simple_query("");
            Err(e)
        }
    }
}
