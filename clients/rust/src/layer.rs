//! The tower layer: one per route. It buffers the request body, claims the key in a transaction,
//! runs the handler inside it, buffers the response, completes and commits, and only then lets
//! the response go; on a lease-mode route it hands the claimed request to `lease`. What both
//! modes share is `route`'s.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderName, Method, Request};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio_postgres::Client;
use tower::{Layer, Service};

use crate::contract::contract;
use crate::core::{is_final, parse_key};
use crate::error::{ErrorMarker, IdemError};
use crate::lease;
use crate::pool::{Pool, PooledClient};
use crate::route::{claim, run_handler, store, RouteConfig, Scope};

/// The idempotency configuration of one route, usable as a tower [`Layer`]:
/// `post(handler).layer(IdemLayer::new(pool))`.
#[derive(Clone)]
pub struct IdemLayer {
    cfg: Arc<RouteConfig>,
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
        return lease::run(&cfg, scope, claim, inner, parts).await;
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
