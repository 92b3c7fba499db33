//! The purge of expired keys: one code path for idem_purge() and the purge worker (the SQL
//! edition's purge in passing is its own, in sql/edition/rules/purge.sql). Each batch is one statement
//! that locks its candidates FOR UPDATE SKIP LOCKED, so that it never waits for a key another
//! transaction holds: SQL only the executor runs, so the purge always goes through SPI, whichever
//! back-end (`engine` or `spi`) serves the calls. It is a module of its own, apart from the SPI
//! key store (`spi`), as it shares none of that store's statements, and it opens its own SPI
//! connection: its callers need none.

use pgrx::datum::DatumWithOid;

use crate::pg::cluster;
use crate::pg::sql::{first_row, get_i64, timestamptz_arg, with_client, Client};
use crate::pg::time::Micros;
use crate::rules::key_row::in_sql;

/// A row is purgeable once both its expiry and any lease have passed ({t} is the table alias).
fn purgeable(t: &str) -> String {
    in_sql::is_purgeable(t, "$1")
}

// One batch, one walk of the purge_after index: lock the first $2 candidates, delete
// those that are purgeable, and move purge_after up for the others (to a bound of
// their real expiry) so that later batches do not walk over them again. Each side
// checks its condition again on the row it changes.
fn purge_batch_sql(table: &str) -> String {
    format!(
        "WITH batch AS MATERIALIZED ( \
             SELECT c.ctid AS row_id, ({c}) AS purgeable, c.purge_after FROM {table} AS c \
              WHERE c.purge_after OPERATOR(pg_catalog.<) $1 AND c.purge_after OPERATOR(pg_catalog.>=) $3 \
                AND ($4::pg_catalog.text[] IS NULL OR c.tenant OPERATOR(pg_catalog.=) ANY ($4::pg_catalog.text[])) \
              ORDER BY c.purge_after LIMIT $2 \
                FOR UPDATE SKIP LOCKED), \
         deleted AS ( \
             DELETE FROM {table} AS k \
              WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT b.row_id FROM batch AS b WHERE b.purgeable)) \
                AND {k} \
             RETURNING 1), \
         rearmed AS ( \
             UPDATE {table} AS k \
                SET purge_after = LEAST(k.expires_at, {rearmed_at}) \
              WHERE k.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT b.row_id FROM batch AS b WHERE NOT b.purgeable)) \
                AND NOT ({k}) \
             RETURNING 1) \
         SELECT (SELECT pg_catalog.count(*) FROM batch), (SELECT pg_catalog.count(*) FROM deleted), \
                (SELECT pg_catalog.count(*) FROM rearmed), (SELECT pg_catalog.max(b.purge_after) FROM batch AS b)",
        c = purgeable("c"),
        k = purgeable("k"),
        rearmed_at = in_sql::ttl_after("k", "$1"),
    )
}

thread_local! {
    /// The text of the batch statement on idem.keys, built once per backend.
    static KEYS_BATCH: String = purge_batch_sql("idem.keys");
}

/// What one purge batch did.
pub struct PurgeBatch {
    pub deleted: i64,
    /// where the next batch of the same pass starts
    pub cursor: PurgeCursor,
    /// whether the pass should go on with another batch
    pub more: bool,
}

/// Where a purge pass has got to: which of the tables it walks (`cluster::local_key_tables`:
/// the shards of idem.keys this node holds, when Citus distributes it), and where in
/// that table's purge_after index. Batches of one pass continue from there instead of walking
/// again over the index entries of rows they already deleted (which stay in the index until
/// VACUUM, and cannot even be skipped cheaply inside one transaction).
#[derive(Clone, Copy, Debug)]
pub struct PurgeCursor {
    target: usize,
    after: Micros,
}

impl PurgeCursor {
    pub fn start() -> Self {
        // TimestampTz -infinity
        PurgeCursor {
            target: 0,
            after: i64::MIN,
        }
    }
}

/// Whose expired keys a purge deletes.
#[derive(Clone, Copy, Debug)]
pub enum Tenants<'a> {
    Every,
    /// Only these tenants' (a caller limited by pg_idem.tenant_grants: it locks no other
    /// tenant's rows in its transaction)
    Only(&'a [String]),
}

/// One purge batch in the caller's transaction: looks at up to `limit` keys whose purge_after
/// has passed, from `cursor` on, skipping any row another transaction has locked, deletes the
/// purgeable ones and re-arms the rest. The work is bounded by `limit`, however large the
/// backlog. Opens its own SPI connection.
pub fn purge_batch(
    now: Micros,
    limit: i64,
    cursor: PurgeCursor,
    tenants: Tenants<'_>,
) -> PurgeBatch {
    with_client(|client| one_batch(client, now, limit, cursor, tenants))
}

/// `purge_batch` through `client`.
fn one_batch(
    client: &Client<'_, '_>,
    now: Micros,
    limit: i64,
    cursor: PurgeCursor,
    tenants: Tenants<'_>,
) -> PurgeBatch {
    let targets = cluster::local_key_tables(client);
    let Some(target) = targets.get(cursor.target) else {
        return PurgeBatch {
            deleted: 0,
            cursor,
            more: false,
        };
    };
    let tenants_arg = match tenants {
        Tenants::Every => DatumWithOid::null::<Vec<String>>(),
        Tenants::Only(tenants) => tenants.to_vec().into(),
    };
    let args = [
        timestamptz_arg(now),
        limit.into(),
        timestamptz_arg(cursor.after),
        tenants_arg,
    ];
    let table = if cursor.target == 0 && target == "idem.keys" {
        first_row(KEYS_BATCH.with(|sql| client.run(sql, &args)))
    } else {
        first_row(client.run(&purge_batch_sql(target), &args))
    };
    let (scanned, deleted, rearmed, last) = match table {
        Some(t) => (
            get_i64(&t, 1).unwrap_or(0),
            get_i64(&t, 2).unwrap_or(0),
            get_i64(&t, 3).unwrap_or(0),
            get_i64(&t, 4),
        ),
        None => (0, 0, 0, None),
    };
    // scanned: candidates the batch looked at (purge_after passed, not locked by anyone else);
    // rearmed: rows whose purge_after it moved forward. A full batch that changed nothing could
    // only repeat itself.
    let this_target_has_more = scanned >= limit && deleted + rearmed > 0;
    let (cursor, more) = if this_target_has_more {
        let after = last.map_or(cursor.after, |last| last.max(cursor.after));
        (PurgeCursor { after, ..cursor }, true)
    } else {
        let next = PurgeCursor {
            target: cursor.target + 1,
            after: i64::MIN,
        };
        (next, next.target < targets.len())
    };
    PurgeBatch {
        deleted,
        cursor,
        more,
    }
}

/// Deletes expired keys in the caller's transaction until `max_rows` are deleted (all when None)
/// or no candidate is left. Returns how many it deleted.
///
/// One statement per table does it all, not batches: inside one transaction the index entries
/// of rows deleted by an earlier batch cannot be marked dead, so every batch would walk again
/// over all of them wherever purge_after values tie (keys claimed in one transaction share their
/// clock): quadratic. A second statement runs only when the first re-armed some of the rows it
/// looked at instead of deleting them, and continues after them. Opens its own SPI connection,
/// one for all its statements.
pub fn purge(now: Micros, max_rows: Option<i64>, tenants: Tenants<'_>) -> i64 {
    with_client(|client| {
        let mut deleted = 0;
        let mut cursor = PurgeCursor::start();
        loop {
            let limit = match max_rows {
                Some(max) if max - deleted <= 0 => return deleted,
                Some(max) => max - deleted,
                None => i64::MAX,
            };
            let batch = one_batch(client, now, limit, cursor, tenants);
            deleted += batch.deleted;
            cursor = batch.cursor;
            if !batch.more {
                return deleted;
            }
        }
    })
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use crate::hashing;
    use crate::pg::sql::interval_arg;
    use crate::rules::key_row::{state_code, KeyRow, State, StoredRow};
    use pgrx::datum::TimestampWithTimeZone;
    use pgrx::prelude::*;

    /// The purge re-arms a row at its ttl from now in SQL: the instant `after` gives in Rust, for
    /// the intervals pg_idem stores, whatever the session's time zone.
    #[pg_test]
    fn a_ttl_added_in_sql_is_the_ttl_added_in_rust() {
        Spi::run("SET LOCAL TimeZone = 'America/New_York'").unwrap();
        // 2026-03-08 06:59:59 UTC: one second before the clocks change in New York
        let now: Micros = 826_268_399_000_000;
        let sql = format!(
            "SELECT {} OPERATOR(pg_catalog.=) $3 FROM (SELECT $2::pg_catalog.interval AS ttl) AS k",
            in_sql::ttl_after("k", "$1")
        );
        for ttl_us in [
            1,
            1_000_000,
            3_600_000_000,
            86_400_000_000,
            7 * 86_400_000_000,
        ] {
            let expected = crate::rules::key_row::after(now, ttl_us);
            let same = Spi::get_one_with_args::<bool>(
                &sql,
                &[
                    timestamptz_arg(now),
                    interval_arg(ttl_us),
                    timestamptz_arg(expected),
                ],
            );
            assert_eq!(same, Ok(Some(true)), "ttl of {ttl_us} us");
        }
    }

    /// The purge and the key statistics test rows in SQL (`rules::key_row::in_sql`), the claims
    /// in Rust (`KeyRow`): each condition agrees with its method at and around every boundary,
    /// for whole rows and for message rows (expires_at NULL, the expiry in purge_after).
    #[pg_test]
    fn the_rules_in_sql_agree_with_the_rules_in_rust() {
        let now: Micros = 800_000_000_000_000;
        let sql = format!(
            "SELECT {}, {}, {} \
               FROM (SELECT $2::pg_catalog.timestamptz AS expires_at, \
                            $3::pg_catalog.timestamptz AS lease_expires_at, \
                            $4::pg_catalog.timestamptz AS purge_after) AS c",
            in_sql::is_expired("c", "$1"),
            in_sql::lease_is_not_live("c", "$1"),
            purgeable("c"),
        );
        let time_arg = |t: Option<Micros>| {
            t.map_or_else(DatumWithOid::null::<TimestampWithTimeZone>, timestamptz_arg)
        };
        for expiry in [now - 1, now, now + 1] {
            for message_row in [false, true] {
                for lease_expires_at in [None, Some(now - 1), Some(now), Some(now + 1)] {
                    if message_row && lease_expires_at.is_some() {
                        continue;
                    }
                    // a whole row's purge_after is at most its expiry; a message row's is it
                    let (expires_at, purge_after) = if message_row {
                        (None, expiry)
                    } else {
                        (Some(expiry), expiry - 5)
                    };
                    let in_sql: (bool, bool, bool) = Spi::connect(|c| {
                        let row = c
                            .select(
                                &sql,
                                None,
                                &[
                                    timestamptz_arg(now),
                                    time_arg(expires_at),
                                    time_arg(lease_expires_at),
                                    timestamptz_arg(purge_after),
                                ],
                            )?
                            .first();
                        Ok::<_, pgrx::spi::Error>((
                            row.get::<bool>(1)?.unwrap(),
                            row.get::<bool>(2)?.unwrap(),
                            row.get::<bool>(3)?.unwrap(),
                        ))
                    })
                    .unwrap();
                    let row = KeyRow::decode(StoredRow {
                        fence: (!message_row).then_some(1),
                        state: Some(state_code(if message_row {
                            State::Completed
                        } else {
                            State::InProgress
                        })),
                        request_hash: (!message_row).then_some([0; hashing::STORED_HASH_BYTES]),
                        attempt: (!message_row).then_some(1),
                        response_code: None,
                        response_body: None,
                        lease_expires_at,
                        expires_at,
                        purge_after: Some(purge_after),
                        ttl: (!message_row).then_some(0),
                        checkpoint: (None, None),
                    });
                    let seen = row.seen(true);
                    let in_rust = (
                        seen.is_expired(now),
                        !seen.lease_is_live(now),
                        seen.is_purgeable(now),
                    );
                    assert_eq!(
                        in_sql, in_rust,
                        "(expired, lease not live, purgeable) with expires_at {expires_at:?}, \
                         purge_after {purge_after}, lease {lease_expires_at:?}, now {now}"
                    );
                }
            }
        }
    }
}
