//! High-watermark dedup for ordered streams (Kafka partitions, CDC positions, per-producer
//! sequences): one row per (tenant, stream) in idem.watermarks, whatever the message count.
//! The watermark moves inside the caller's transaction, so a rollback undoes it; concurrent
//! calls on one stream serialise on its row (the second waits for the first to commit or roll
//! back, because only then is it known whether its message is new).

use pgrx::prelude::*;

use crate::errors;
use crate::pg::datum::{self, Record};
use crate::pg::sql::{self, timestamptz_arg};
use crate::pg::time::clock;
use crate::sql_api::args::{self, check};

const ADVANCE: &str = "INSERT INTO idem.watermarks AS w (tenant, stream, watermark, updated_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (tenant, stream) DO UPDATE SET watermark = EXCLUDED.watermark, updated_at = EXCLUDED.updated_at \
     WHERE w.watermark OPERATOR(pg_catalog.<) EXCLUDED.watermark \
     RETURNING w.watermark";

const CURRENT: &str = "SELECT w.watermark FROM idem.watermarks AS w \
     WHERE w.tenant OPERATOR(pg_catalog.=) $1 AND w.stream OPERATOR(pg_catalog.=) $2";

const LOCK_CURRENT: &str = "SELECT w.watermark FROM idem.watermarks AS w \
     WHERE w.tenant OPERATOR(pg_catalog.=) $1 AND w.stream OPERATOR(pg_catalog.=) $2 FOR UPDATE OF w";

const RESET: &str = "INSERT INTO idem.watermarks AS w (tenant, stream, watermark, updated_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (tenant, stream) DO UPDATE SET watermark = EXCLUDED.watermark, updated_at = EXCLUDED.updated_at \
     RETURNING w.watermark";

fn seq_arg(seq: Option<i64>, argument: &str) -> i64 {
    seq.unwrap_or_else(|| {
        errors::null_argument(argument, "Pass the message's sequence number or offset.").raise()
    })
}

fn stream_args<'a>(tenant: Option<&'a str>, stream: Option<&'a str>) -> (&'a str, &'a str) {
    let (tenant, stream) = check(args::tenant_and_key(tenant, stream, "stream"));
    crate::tenants::check_access(tenant);
    (tenant, stream)
}

/// The stream's watermark: via a prepared plan of `sql` with (tenant, stream) as $1, $2.
fn watermark(
    client: &sql::Client<'_, '_>,
    sql: &'static str,
    tenant: &str,
    stream: &str,
) -> Option<i64> {
    client.query_one_i64(sql, &[tenant.into(), stream.into()])
}

#[pg_extern(sql = false)]
fn idem_claim_seq(
    fcinfo: pg_sys::FunctionCallInfo,
    tenant: Option<&str>,
    stream: Option<&str>,
    seq: Option<i64>,
) -> Record {
    let (tenant, stream) = stream_args(tenant, stream);
    let seq = seq_arg(seq, "seq");
    let now = clock();
    let (outcome, mark) = sql::with_client(|client| {
        let advanced = client.query_one_i64(
            ADVANCE,
            &[
                tenant.into(),
                stream.into(),
                seq.into(),
                timestamptz_arg(now),
            ],
        );
        match advanced {
            Some(mark) => ("new", Some(mark)),
            // the row is locked by the upsert above: this reads its latest committed value
            None => ("duplicate", watermark(client, CURRENT, tenant, stream)),
        }
    });
    datum::record(fcinfo, &[outcome.into_datum(), mark.into_datum()])
}

#[pg_extern(sql = false)]
fn idem_watermark(tenant: Option<&str>, stream: Option<&str>) -> Option<i64> {
    let (tenant, stream) = stream_args(tenant, stream);
    sql::with_client(|client| watermark(client, CURRENT, tenant, stream))
}

#[pg_extern(sql = false)]
fn idem_reset_watermark(
    tenant: Option<&str>,
    stream: Option<&str>,
    seq: Option<i64>,
) -> Option<i64> {
    let (tenant, stream) = stream_args(tenant, stream);
    let seq = seq_arg(seq, "seq");
    let now = clock();
    sql::with_client(|client| {
        let previous = watermark(client, LOCK_CURRENT, tenant, stream);
        client.query_one_i64(
            RESET,
            &[
                tenant.into(),
                stream.into(),
                seq.into(),
                timestamptz_arg(now),
            ],
        );
        previous
    })
}

/// In-server tests: each runs inside one transaction that is rolled back afterwards; what needs
/// several sessions is tested through real client connections in tests/.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[allow(unused_imports)]
    use crate::testing::*;

    #[pg_test]
    fn watermarks_move_only_forward() {
        assert_eq!(
            one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 5)")
                .as_deref(),
            Some("new")
        );
        assert_eq!(
            one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 5)")
                .as_deref(),
            Some("duplicate")
        );
        assert_eq!(
            one_i64("SELECT watermark FROM idem_claim_seq('watermarks_move_only_forward', 's', 4)"),
            Some(5)
        );
        assert_eq!(
            one_i64("SELECT idem_reset_watermark('watermarks_move_only_forward', 's', 1)"),
            Some(5)
        );
        assert_eq!(
            one_i64("SELECT idem_watermark('watermarks_move_only_forward', 's')"),
            Some(1)
        );
        assert_eq!(
            one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 2)")
                .as_deref(),
            Some("new")
        );
    }
}
