//! What both modes of a route share: its configuration, the request's scope, the claim
//! statement and its row, the handler run with its response buffered, the stored response, and
//! the answers to every outcome but `claimed`. The tower layer (`layer`, transaction mode) and
//! lease mode (`lease`, to which the layer hands a claimed request) both use it, so the
//! dependencies point one way: `layer` -> `lease` -> `route`.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};
use tower::Service;

use crate::contract::contract;
use crate::core::{build_envelope, is_final, replay};
use crate::error::{ErrorMarker, IdemError};
use crate::pool::{Pool, Statements};

// boxed: a Response is large, and the hook's Ok path is the common one
pub(crate) type TenantHook =
    Arc<dyn Fn(&Parts) -> Result<Option<String>, Box<Response>> + Send + Sync>;

/// The idempotency configuration of one route (`IdemLayer` builds it).
#[derive(Clone)]
pub(crate) struct RouteConfig {
    pub pool: Pool,
    pub method: Option<Method>,
    pub route: Option<String>,
    pub key_required: bool,
    pub ttl: Option<String>,
    pub lease: Option<String>,
    pub fields: Option<Vec<String>>,
    pub tenant: Option<TenantHook>,
    pub single_tenant: Option<String>,
    pub stored_headers: Vec<String>,
    pub key_header: HeaderName,
    pub replay_header: HeaderName,
    pub statement_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub retry_after_seconds: u32,
    pub body_limit: usize,
}

impl RouteConfig {
    /// The located statements; a configuration is only used after the start check found them.
    pub(crate) fn statements(&self) -> Result<&Statements, IdemError> {
        self.pool.statements_now().ok_or_else(IdemError::internal)
    }

    /// [`IdemLayer::complete`] without counting the success (the layer counts it after its commit).
    pub(crate) async fn store_response(
        &self,
        tx: &(impl GenericClient + Sync),
        scope: &Scope,
        claim: &Claim,
        parts: &http::response::Parts,
        body: &Bytes,
    ) -> Result<(), Response> {
        let cfg = self;
        let outcomes = cfg.pool.outcomes();
        if !is_final(parts.status.as_u16()) || parts.extensions.get::<ErrorMarker>().is_some() {
            outcomes.record("rolled_back", "a status a retry may change");
            return Err(cfg.finish(Response::from_parts(
                parts.clone(),
                Body::from(body.clone()),
            )));
        }
        let statements = self.statements().map_err(|e| cfg.error(e))?;
        let Some(fence) = claim.fence else {
            outcomes.record("database_error", "a claim without a fence");
            return Err(cfg.error(IdemError::internal()));
        };
        let stored = store(
            cfg,
            statements,
            tx,
            &scope.tenant,
            &claim.scoped_key,
            fence,
            claim.txid,
            parts,
            body,
        )
        .await;
        match stored {
            Ok(true) => Ok(()),
            Ok(false) => {
                outcomes.record("transaction_ended", &format!("the handler ended the transaction of {} (COMMIT or ROLLBACK as SQL): nothing stored", claim.scoped_key));
                Err(cfg.error(IdemError::internal()))
            }
            Err(err) => {
                let err = IdemError::from_db(&err);
                let outcome = if err.name() == "lease_lost" {
                    "lease_lost"
                } else {
                    "database_error"
                };
                outcomes.record(outcome, err.message());
                Err(cfg.error(err))
            }
        }
    }
}

/// What a request resolved to before any claim: who, which key, which request.
#[derive(Debug, Clone)]
pub struct Scope {
    /// From the tenant hook, or `single_tenant`.
    pub tenant: String,
    /// The parsed `Idempotency-Key` (`None` on an optional-key route called without one).
    pub key: Option<String>,
    /// The method the key is scoped by.
    pub method: String,
    /// The route template (`/orders/{id}`) the key is scoped by.
    pub route: String,
    /// The normalised request target the fingerprint binds (`/orders/7?x=1`).
    pub target: String,
    /// The request body, read whole (up to the route's limit).
    pub body: Bytes,
}

/// The claim statement's row.
#[derive(Debug, Clone)]
pub struct Claim {
    pub scoped_key: String,
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    pub response_body: Option<String>,
    pub checkpoint_phase: Option<String>,
    pub checkpoint_data: Option<String>,
    pub retry_after: Option<i32>,
    /// The claiming transaction's id: completion checks it is still the one running.
    pub txid: Option<i64>,
}

impl Claim {
    /// Whether this request holds the key: run the handler, then complete.
    pub fn is_claimed(&self) -> bool {
        self.outcome == "claimed"
    }

    fn from_row(row: &Row) -> Result<Self, tokio_postgres::Error> {
        Ok(Claim {
            scoped_key: row.try_get("scoped_key")?,
            outcome: row.try_get("outcome")?,
            fence: row.try_get("fence")?,
            attempt: row.try_get("attempt")?,
            response_code: row.try_get("response_code")?,
            response_body: row.try_get("response_body")?,
            checkpoint_phase: row.try_get("checkpoint_phase")?,
            checkpoint_data: row.try_get("checkpoint_data")?,
            retry_after: row.try_get("retry_after")?,
            txid: row.try_get("txid")?,
        })
    }
}

/// The claim statement in the caller's open transaction (the database computes the scoped key
/// and the fingerprint).
pub(crate) async fn claim(
    cfg: &RouteConfig,
    statements: &Statements,
    tx: &(impl GenericClient + Sync),
    s: &Scope,
    key: &String,
) -> Result<Claim, IdemError> {
    let body: &[u8] = &s.body;
    let statement_timeout = cfg.statement_timeout_ms.to_string();
    let idle_timeout = cfg.idle_timeout_ms.to_string();
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&s.tenant, Type::TEXT),
        (&s.method, Type::TEXT),
        (&s.route, Type::TEXT),
        (key, Type::TEXT),
        (&body, Type::BYTEA),
        (&cfg.lease, Type::TEXT),
        (&cfg.ttl, Type::TEXT),
        (&statement_timeout, Type::TEXT),
        (&idle_timeout, Type::TEXT),
        (&s.target, Type::TEXT),
    ];
    // $11 only where the statement has it (fields mode)
    if let Some(fields) = &cfg.fields {
        params.push((fields, Type::TEXT_ARRAY));
    }
    let sql = if cfg.fields.is_some() {
        &statements.claim_fields
    } else {
        &statements.claim_body
    };
    // query_typed: an unnamed statement, so a transaction pooler can move us between servers
    let rows = tx.query_typed(sql, &params).await?;
    let row = rows.first().ok_or_else(IdemError::internal)?;
    Ok(Claim::from_row(row)?)
}

/// `complete` (status < 400) or `fail_final` (4xx) with the response's envelope, in the claim's
/// transaction. `Ok(false)`: no row, the transaction is no longer the claim's (the handler ended
/// it with SQL): nothing may be committed.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn store(
    cfg: &RouteConfig,
    statements: &Statements,
    tx: &(impl GenericClient + Sync),
    tenant: &String,
    scoped_key: &String,
    fence: i64,
    txid: Option<i64>,
    parts: &http::response::Parts,
    body: &Bytes,
) -> Result<bool, tokio_postgres::Error> {
    let headers = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let envelope = build_envelope(headers, body, &cfg.stored_headers).to_string();
    let status = i32::from(parts.status.as_u16());
    let statement = if status < 400 {
        &statements.complete
    } else {
        &statements.fail_final
    };
    let params: [(&(dyn ToSql + Sync), Type); 6] = [
        (tenant, Type::TEXT),
        (scoped_key, Type::TEXT),
        (&fence, Type::INT8),
        (&status, Type::INT4),
        (&envelope, Type::TEXT),
        (&txid, Type::INT8),
    ];
    Ok(!tx.query_typed(statement, &params).await?.is_empty())
}

/// Calls the handler and buffers its response; `None` when it panicked or its body failed.
pub(crate) async fn run_handler<S>(
    inner: S,
    req: Request<Body>,
) -> Option<(http::response::Parts, Bytes)>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let mut inner = inner;
    let response = match CatchUnwind(Box::pin(inner.call(req))).await {
        Ok(Ok(response)) => response,
        Ok(Err(never)) => match never {},
        Err(_) => {
            tracing::error!(target: "pg_idem_http", "the handler panicked");
            return None;
        }
    };
    let (parts, body) = response.into_parts();
    let body = CatchUnwind(Box::pin(body.collect()))
        .await
        .ok()?
        .ok()?
        .to_bytes();
    Some((parts, body))
}

/// A panicking handler must still end its transaction: the panic becomes an error value here
/// (axum itself would drop the connection).
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

impl RouteConfig {
    /// An error response with this route's `Retry-After` default.
    pub(crate) fn error(&self, err: IdemError) -> Response {
        self.finish(err.into_response())
    }

    pub(crate) fn finish(&self, mut response: Response) -> Response {
        let default = response
            .extensions()
            .get::<ErrorMarker>()
            .is_some_and(|m| m.default_retry_after);
        if default {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(self.retry_after_seconds),
            );
        }
        response
    }

    /// The outcome counted for a claim that was not `claimed`.
    pub(crate) fn unclaimed_outcome(claim: &Claim) -> &'static str {
        match claim.outcome.as_str() {
            "completed" | "failed" => "replayed",
            "in_progress" => "in_progress",
            "mismatch" => "mismatch",
            // the database refused the key itself (pg_idem.reject_stale_uuidv7)
            "stale_key" => "rejected",
            _ => "database_error",
        }
    }

    /// The answer to any outcome but `claimed`.
    pub(crate) fn unclaimed(&self, claim: &Claim) -> Response {
        match claim.outcome.as_str() {
            "completed" | "failed" => self.replayed(claim),
            "in_progress" => {
                // a holder with a lease says when it expires; an uncommitted claim has none
                let seconds = claim.retry_after.and_then(|s| u32::try_from(s).ok());
                let err = IdemError::new("in_progress");
                self.error(seconds.map_or(err.clone(), |s| err.retry_after(s)))
            }
            "mismatch" => self.error(IdemError::new("mismatch")),
            "stale_key" => self.error(IdemError::new("stale_key")),
            other => {
                tracing::error!(target: "pg_idem_http", "unknown claim outcome {other:?}");
                self.error(IdemError::internal())
            }
        }
    }

    fn replayed(&self, claim: &Claim) -> Response {
        let Ok(stored) = replay(claim.response_body.as_deref()) else {
            tracing::error!(target: "pg_idem_http", "the stored response of {:?} is not an envelope this package reads", claim.scoped_key);
            return self.error(IdemError::internal());
        };
        let mut response = Response::new(Body::from(stored.body));
        *response.status_mut() = claim
            .response_code
            .and_then(|c| u16::try_from(c).ok())
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in stored.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.append(name, value);
            }
        }
        let value = HeaderValue::from_str(&contract().defaults.replay_header_value)
            .expect("contract replay value");
        headers.insert(self.replay_header.clone(), value);
        response
    }
}
