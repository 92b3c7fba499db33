//! The tower layer: one per route. It buffers the request body, claims the key in a transaction,
//! runs the handler inside it, buffers the response, completes and commits, and only then lets
//! the response go.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};
use tower::{Layer, Service};

use crate::contract::{claim_sql, contract};
use crate::core::{build_envelope, is_final, parse_key, replay};
use crate::error::{ErrorMarker, IdemError};
use crate::pool::{Pool, PooledClient};

// boxed: a Response is large, and the hook's Ok path is the common one
type TenantHook = Arc<dyn Fn(&Parts) -> Result<String, Box<Response>> + Send + Sync>;

/// The idempotency configuration of one route, usable as a tower [`Layer`]:
/// `post(handler).layer(IdemLayer::new(pool))`.
#[derive(Clone)]
pub struct IdemLayer {
    cfg: Arc<RouteConfig>,
}

#[derive(Clone)]
pub(crate) struct RouteConfig {
    pub pool: Pool,
    method: Option<Method>,
    route: Option<String>,
    key_required: bool,
    ttl: Option<String>,
    pub lease: Option<String>,
    fields: Option<Vec<String>>,
    tenant: Option<TenantHook>,
    stored_headers: Vec<String>,
    key_header: HeaderName,
    replay_header: HeaderName,
    statement_timeout_ms: u64,
    idle_timeout_ms: u64,
    pub retry_after_seconds: u32,
    body_limit: usize,
}

impl IdemLayer {
    /// The contract's defaults: key required, fingerprint of the body's bytes, the request's
    /// method and the route template axum matched, tenant `defaults.tenant`.
    pub fn new(pool: Pool) -> Self {
        let d = &contract().defaults;
        IdemLayer {
            cfg: Arc::new(RouteConfig {
                pool,
                method: None,
                route: None,
                key_required: true,
                ttl: None,
                lease: None,
                fields: None,
                tenant: None,
                stored_headers: d.stored_headers.clone(),
                key_header: HeaderName::from_bytes(d.key_header.as_bytes())
                    .expect("contract key_header"),
                replay_header: HeaderName::from_bytes(d.replay_header.as_bytes())
                    .expect("contract replay_header"),
                statement_timeout_ms: d.statement_timeout_ms,
                idle_timeout_ms: d.idle_in_transaction_timeout_ms,
                retry_after_seconds: d.retry_after_seconds,
                body_limit: d.max_body_bytes,
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut RouteConfig)) -> Self {
        f(Arc::make_mut(&mut self.cfg));
        self
    }

    /// Scope keys by this method and route template instead of the request's method and axum's
    /// `MatchedPath` (needed where the layer runs outside a `Router`).
    pub fn route(self, method: Method, template: impl Into<String>) -> Self {
        let template = template.into();
        self.with(|c| {
            c.method = Some(method);
            c.route = Some(template);
        })
    }

    /// Without a key the handler runs in a plain transaction, with no claim.
    pub fn optional_key(self) -> Self {
        self.with(|c| c.key_required = false)
    }

    /// How long the stored response is kept (an interval such as `24 hours`); else the database's default.
    pub fn ttl(self, ttl: impl Into<String>) -> Self {
        let ttl = ttl.into();
        self.with(|c| c.ttl = Some(ttl))
    }

    /// Lease mode (an interval such as `30 seconds`): the handler gets a [`crate::Lease`], not an [`Idem`].
    pub fn lease(self, lease: impl Into<String>) -> Self {
        let lease = lease.into();
        self.with(|c| c.lease = Some(lease))
    }

    /// Fingerprint these JSON fields of the body (pg_idem's canonical hash) instead of its bytes.
    pub fn fingerprint_fields<I: IntoIterator<Item = S>, S: Into<String>>(self, fields: I) -> Self {
        let fields = fields.into_iter().map(Into::into).collect();
        self.with(|c| c.fields = Some(fields))
    }

    /// The tenant of a request (your auth); an `Err` response is sent as it is, before any claim.
    pub fn tenant<F, R>(self, hook: F) -> Self
    where
        F: Fn(&Parts) -> Result<String, R> + Send + Sync + 'static,
        R: IntoResponse,
    {
        let hook = move |parts: &Parts| hook(parts).map_err(|r| Box::new(r.into_response()));
        self.with(|c| c.tenant = Some(Arc::new(hook)))
    }

    /// The response headers stored with the body and replayed (case-insensitive names).
    pub fn stored_headers<I: IntoIterator<Item = S>, S: Into<String>>(self, names: I) -> Self {
        let names = names
            .into_iter()
            .map(|n| n.into().to_ascii_lowercase())
            .collect();
        self.with(|c| c.stored_headers = names)
    }

    pub fn key_header(self, name: HeaderName) -> Self {
        self.with(|c| c.key_header = name)
    }

    pub fn replay_header(self, name: HeaderName) -> Self {
        self.with(|c| c.replay_header = name)
    }

    /// `statement_timeout` and `idle_in_transaction_session_timeout`, set LOCAL to the claim's transaction.
    pub fn timeouts_ms(self, statement: u64, idle_in_transaction: u64) -> Self {
        self.with(|c| {
            c.statement_timeout_ms = statement;
            c.idle_timeout_ms = idle_in_transaction;
        })
    }

    /// `Retry-After` where the database gives no lease expiry.
    pub fn retry_after_seconds(self, seconds: u32) -> Self {
        self.with(|c| c.retry_after_seconds = seconds)
    }

    /// The largest request body buffered for the fingerprint (2 MiB unless set); beyond: 413.
    pub fn body_limit(self, bytes: usize) -> Self {
        self.with(|c| c.body_limit = bytes)
    }
}

impl<S> Layer<S> for IdemLayer {
    type Service = IdemService<S>;
    fn layer(&self, inner: S) -> IdemService<S> {
        IdemService {
            inner,
            cfg: Arc::clone(&self.cfg),
        }
    }
}

/// The service [`IdemLayer`] wraps a handler in.
#[derive(Clone)]
pub struct IdemService<S> {
    inner: S,
    cfg: Arc<RouteConfig>,
}

impl<S> Service<Request<Body>> for IdemService<S>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // the clone that was polled ready is the one that runs
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let cfg = Arc::clone(&self.cfg);
        Box::pin(async move { Ok(handle(cfg, inner, req).await) })
    }
}

/// What the handler of a transaction-mode route gets: the connection inside the claimed
/// transaction (`Deref` to `tokio_postgres::Client`), for its business writes. Use
/// `query_typed`/`execute_typed`-style unnamed statements to stay PgBouncer-safe.
#[derive(Clone)]
pub struct Idem {
    client: Arc<Client>,
    tenant: String,
    key: Option<String>,
    scoped_key: Option<String>,
    fence: Option<i64>,
    attempt: Option<i32>,
}

impl Idem {
    pub fn client(&self) -> &Client {
        &self.client
    }
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The parsed key (`None` on an optional-key route called without one).
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
    /// `METHOD route key`, as the database stores it.
    pub fn scoped_key(&self) -> Option<&str> {
        self.scoped_key.as_deref()
    }
    pub fn fence(&self) -> Option<i64> {
        self.fence
    }
    pub fn attempt(&self) -> Option<i32> {
        self.attempt
    }
}

impl std::ops::Deref for Idem {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Idem {
    type Rejection = IdemError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, IdemError> {
        // missing only when the route has no IdemLayer: a programming error
        parts
            .extensions
            .get::<Idem>()
            .cloned()
            .ok_or_else(IdemError::internal)
    }
}

/// What a request resolved to before its handler runs.
pub(crate) struct Scope {
    pub tenant: String,
    pub key: String,
    pub method: String,
    pub route: String,
    pub body: Bytes,
}

/// The claim statement's row.
pub(crate) struct Claim {
    pub scoped_key: String,
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    pub response_body: Option<String>,
    pub checkpoint_phase: Option<String>,
    pub checkpoint_data: Option<String>,
    pub retry_after: Option<i32>,
}

impl Claim {
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
        })
    }
}

async fn handle<S>(cfg: Arc<RouteConfig>, inner: S, req: Request<Body>) -> Response
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let (mut parts, body) = req.into_parts();
    let tenant = match &cfg.tenant {
        Some(hook) => match hook(&parts) {
            Ok(tenant) => tenant,
            Err(response) => return *response,
        },
        None => contract().defaults.tenant.clone(),
    };
    let mut values = parts.headers.get_all(&cfg.key_header).iter();
    let key = match (values.next(), values.next()) {
        (None, _) => None,
        // one key per request: several header lines are malformed
        (Some(raw), None) => match parse_key(raw.as_bytes()) {
            Some(key) => Some(key),
            None => return cfg.error(IdemError::new("key_invalid")),
        },
        (Some(_), Some(_)) => return cfg.error(IdemError::new("key_invalid")),
    };
    if key.is_none() && cfg.key_required {
        return cfg.error(IdemError::new("key_missing"));
    }
    let body = match Limited::new(body, cfg.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.is::<LengthLimitError>() => {
            return cfg.error(IdemError::new("payload_too_large"));
        }
        Err(_) => return cfg.error(IdemError::internal()),
    };
    let mut conn = match cfg.pool.get().await {
        Ok(conn) => conn,
        Err(err) => return cfg.error(IdemError::from_db(&err)),
    };
    let Some(key) = key else {
        let idem = Idem {
            client: conn.shared(),
            tenant,
            key: None,
            scoped_key: None,
            fence: None,
            attempt: None,
        };
        parts.extensions.insert(idem);
        if let Err(err) = conn.run("BEGIN").await {
            return cfg.error(IdemError::from_db(&err));
        }
        return in_transaction(
            &cfg,
            conn,
            None,
            inner,
            Request::from_parts(parts, Body::from(body)),
        )
        .await;
    };
    let method = cfg
        .method
        .as_ref()
        .unwrap_or(&parts.method)
        .as_str()
        .to_owned();
    let route = match (&cfg.route, parts.extensions.get::<MatchedPath>()) {
        (Some(route), _) => route.clone(),
        (None, Some(matched)) => matched.as_str().to_owned(),
        (None, None) => parts.uri.path().to_owned(),
    };
    let scope = Scope {
        tenant,
        key,
        method,
        route,
        body,
    };
    let claim = match claim(&cfg, &mut conn, &scope).await {
        Ok(claim) => claim,
        Err(err) => return cfg.error(err),
    };
    if claim.outcome != "claimed" {
        // nothing of ours to keep; a failed ROLLBACK only costs the connection
        let _ = conn.run("ROLLBACK").await;
        return cfg.unclaimed(&claim);
    }
    if cfg.lease.is_some() {
        if let Err(err) = conn.run("COMMIT").await {
            return cfg.error(IdemError::from_db(&err));
        }
        drop(conn);
        return crate::lease::run(&cfg, scope, claim, inner, parts).await;
    }
    let idem = Idem {
        client: conn.shared(),
        tenant: scope.tenant.clone(),
        key: Some(scope.key.clone()),
        scoped_key: Some(claim.scoped_key.clone()),
        fence: claim.fence,
        attempt: claim.attempt,
    };
    parts.extensions.insert(idem);
    let Some(fence) = claim.fence else {
        // a claim always has a fence; without one nothing could be stored
        return cfg.error(IdemError::internal());
    };
    let target = Some((&scope.tenant, &claim.scoped_key, fence));
    let req = Request::from_parts(parts, Body::from(scope.body.clone()));
    in_transaction(&cfg, conn, target, inner, req).await
}

/// BEGIN and the claim statement (the database computes the scoped key and the fingerprint).
pub(crate) async fn claim(
    cfg: &RouteConfig,
    conn: &mut PooledClient,
    s: &Scope,
) -> Result<Claim, IdemError> {
    conn.run("BEGIN").await?;
    let body: &[u8] = &s.body;
    let statement_timeout = cfg.statement_timeout_ms.to_string();
    let idle_timeout = cfg.idle_timeout_ms.to_string();
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&s.tenant, Type::TEXT),
        (&s.method, Type::TEXT),
        (&s.route, Type::TEXT),
        (&s.key, Type::TEXT),
        (&body, Type::BYTEA),
        (&cfg.lease, Type::TEXT),
        (&cfg.ttl, Type::TEXT),
        (&statement_timeout, Type::TEXT),
        (&idle_timeout, Type::TEXT),
    ];
    if let Some(fields) = &cfg.fields {
        params.push((fields, Type::TEXT_ARRAY));
    }
    // query_typed: an unnamed statement, so a transaction pooler can move us between servers
    let rows = conn
        .query_typed(claim_sql(cfg.fields.is_some()), &params)
        .await?;
    let row = rows.first().ok_or_else(IdemError::internal)?;
    Ok(Claim::from_row(row)?)
}

/// Runs the handler inside `conn`'s open transaction; commits (after storing the response under
/// `target`'s fence, when there is one) only for a final status, and answers after the commit.
pub(crate) async fn in_transaction<S>(
    cfg: &RouteConfig,
    mut conn: PooledClient,
    target: Option<(&String, &String, i64)>,
    inner: S,
    req: Request<Body>,
) -> Response
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let (parts, body) = match run_handler(inner, req).await {
        Some(buffered) => buffered,
        None => {
            let _ = conn.run("ROLLBACK").await;
            return cfg.error(IdemError::internal());
        }
    };
    if parts.extensions.get::<ErrorMarker>().is_some() || !is_final(parts.status.as_u16()) {
        let _ = conn.run("ROLLBACK").await;
        return cfg.finish(Response::from_parts(parts, Body::from(body)));
    }
    let stored = async {
        match target {
            Some((tenant, key, fence)) => {
                store(cfg, &conn, tenant, key, fence, &parts, &body).await?
            }
            // COMMIT of an aborted transaction (a handler that swallowed an error) reports no
            // error, it rolls back: a statement first makes the abort an error we can see
            None => conn.batch_execute("SELECT 1").await?,
        }
        conn.run("COMMIT").await
    };
    match stored.await {
        Ok(()) => Response::from_parts(parts, Body::from(body)),
        Err(err) => {
            // the session may be in an aborted transaction or gone: it is not reused
            cfg.error(IdemError::from_db(&err))
        }
    }
}

/// `complete` (status < 400) or `fail_final` (4xx) with the response's envelope.
pub(crate) async fn store(
    cfg: &RouteConfig,
    client: &Client,
    tenant: &String,
    scoped_key: &String,
    fence: i64,
    parts: &http::response::Parts,
    body: &Bytes,
) -> Result<(), tokio_postgres::Error> {
    let headers = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let envelope = build_envelope(headers, body, &cfg.stored_headers).to_string();
    let status = i32::from(parts.status.as_u16());
    let sql = &contract().sql;
    let statement = if status < 400 {
        &sql.complete
    } else {
        &sql.fail_final
    };
    let params: [(&(dyn ToSql + Sync), Type); 5] = [
        (tenant, Type::TEXT),
        (scoped_key, Type::TEXT),
        (&fence, Type::INT8),
        (&status, Type::INT4),
        (&envelope, Type::TEXT),
    ];
    client.query_typed(statement, &params).await.map(drop)
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
            eprintln!("pg-idem-http: the handler panicked; its transaction is rolled back");
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
                eprintln!("pg-idem-http: unknown claim outcome {other:?}");
                self.error(IdemError::internal())
            }
        }
    }

    fn replayed(&self, claim: &Claim) -> Response {
        let stored = replay(claim.response_body.as_deref());
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
