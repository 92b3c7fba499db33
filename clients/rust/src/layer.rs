//! The tower layer: one per route. It buffers the request body, claims the key in a transaction,
//! runs the handler inside it, buffers the response, completes and commits, and only then lets
//! the response go; on a lease-mode route it hands the claimed request to `lease`. What both
//! modes share is `route`'s. The same steps are public ([`IdemLayer::scope`],
//! [`IdemLayer::claim`], [`IdemLayer::complete`], [`IdemLayer::answer`]) for handlers that own
//! their transaction.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, OriginalUri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Method, Request};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio_postgres::{Client, GenericClient};
use tower::{Layer, Service};
use tracing::Instrument;

use crate::contract::contract;
use crate::core::{is_final, never_stored, normalize_target, parse_key};
use crate::error::{ErrorMarker, IdemError};
use crate::lease;
use crate::pool::{Conn, Pool, StartError, Statements};
use crate::route::{claim, run_handler, Claim, RouteConfig, Scope};

/// The idempotency configuration of one route, before [`IdemLayerBuilder::build`] checked it.
#[derive(Clone)]
pub struct IdemLayerBuilder {
    cfg: RouteConfig,
}

/// A checked route configuration, usable as a tower [`Layer`]:
/// `post(handler).layer(layer)`, or step by step in a handler that owns its transaction.
#[derive(Clone)]
pub struct IdemLayer {
    cfg: Arc<RouteConfig>,
}

impl IdemLayer {
    /// The contract's defaults: key required, fingerprint of the body's bytes and the request
    /// target, the request's method and the route template axum matched. A tenant hook or
    /// `single_tenant` is required.
    pub fn builder(pool: Pool) -> IdemLayerBuilder {
        let d = &contract().defaults;
        IdemLayerBuilder {
            cfg: RouteConfig {
                pool,
                method: None,
                route: None,
                key_required: true,
                ttl: None,
                lease: None,
                fields: None,
                tenant: None,
                single_tenant: None,
                stored_headers: d.stored_headers.clone(),
                key_header: HeaderName::from_bytes(d.key_header.as_bytes())
                    .expect("contract key_header"),
                replay_header: HeaderName::from_bytes(d.replay_header.as_bytes())
                    .expect("contract replay_header"),
                statement_timeout_ms: d.statement_timeout_ms,
                idle_timeout_ms: d.idle_in_transaction_timeout_ms,
                retry_after_seconds: d.retry_after_seconds,
                body_limit: d.max_body_bytes,
            },
        }
    }
}

impl IdemLayerBuilder {
    fn with(mut self, f: impl FnOnce(&mut RouteConfig)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// Scope keys by this method and route template (`/orders/{id}`) instead of the request's
    /// method and axum's `MatchedPath` (needed where the layer runs outside a `Router`).
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

    /// The tenant of a request: your auth's account, never a value the client picks freely.
    /// `None` or `""` is 400 `tenant_missing`, before any claim.
    pub fn tenant<F>(self, hook: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.tenant_or_reject(move |parts| Ok::<_, Infallible>(hook(parts)))
    }

    /// As [`IdemLayerBuilder::tenant`], with the hook's own rejection (sent as it is, before any claim).
    pub fn tenant_or_reject<F, R>(self, hook: F) -> Self
    where
        F: Fn(&Parts) -> Result<Option<String>, R> + Send + Sync + 'static,
        R: IntoResponse,
    {
        let hook = move |parts: &Parts| hook(parts).map_err(|r| Box::new(r.into_response()));
        self.with(|c| c.tenant = Some(Arc::new(hook)))
    }

    /// Every caller shares this one tenant: the application says so instead of giving a hook.
    pub fn single_tenant(self, tenant: impl Into<String>) -> Self {
        let tenant = tenant.into();
        self.with(|c| c.single_tenant = Some(tenant))
    }

    /// The response headers stored with the body and replayed (case-insensitive names). Names
    /// of the contract's `never_stored_headers` are refused by [`IdemLayerBuilder::build`].
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

    /// The largest request body buffered for the fingerprint (`defaults.max_body_bytes` unless set); beyond: 413.
    pub fn body_limit(self, bytes: usize) -> Self {
        self.with(|c| c.body_limit = bytes)
    }

    /// Checks the configuration without a database: the tenant, the stored headers.
    pub fn check(&self) -> Result<(), StartError> {
        let c = &self.cfg;
        match (&c.tenant, &c.single_tenant) {
            (None, None) => return Err(StartError(
                "no tenant: give a tenant hook (.tenant(|parts| ...), from your auth) or, when every caller shares one namespace, .single_tenant(\"name\")".into(),
            )),
            (Some(_), Some(_)) => return Err(StartError(
                "both a tenant hook and single_tenant: give one of them".into(),
            )),
            (None, Some(t)) if t.is_empty() => return Err(StartError("single_tenant is empty".into())),
            _ => {}
        }
        if let Some(name) = c.stored_headers.iter().find(|n| never_stored(n)) {
            return Err(StartError(format!(
                "stored_headers names {name}, which is never stored or replayed (a replay goes to whoever holds the key)"
            )));
        }
        Ok(())
    }

    /// Checks the configuration, then pg_idem in the database (once per pool: found, not
    /// shadowed, recent enough). An error says what to fix; do not serve without the layer.
    pub async fn build(self) -> Result<IdemLayer, StartError> {
        self.check()?;
        self.cfg.pool.statements().await?;
        Ok(IdemLayer {
            cfg: Arc::new(self.cfg),
        })
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
        let span = tracing::info_span!(target: "pg_idem_http", "idempotent_request", method = %req.method(), path = %req.uri().path());
        Box::pin(async move { Ok(handle(cfg, inner, req).await) }.instrument(span))
    }
}

/// What the handler of a transaction-mode route gets: the connection inside the claimed
/// transaction, for its business writes. It derefs to `tokio_postgres::Client` for queries
/// (use `query_typed`, unnamed statements, to stay PgBouncer-safe) but cannot end the
/// transaction: only the layer commits (after storing the response) or rolls back.
#[derive(Clone)]
pub struct Idem {
    conn: Arc<Conn>,
    tenant: String,
    key: Option<String>,
    scoped_key: Option<String>,
    fence: Option<i64>,
    attempt: Option<i32>,
}

impl Idem {
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

    /// Always refused (500 `internal_error` with `?`): the layer commits, after storing the
    /// response with the claim. Code written for a driver transaction fails loudly here.
    pub async fn commit(&self) -> Result<(), IdemError> {
        Err(refused("commit"))
    }

    /// Always refused, as [`Idem::commit`]: return a non-final status or an error to roll back.
    pub async fn rollback(&self) -> Result<(), IdemError> {
        Err(refused("rollback"))
    }
}

fn refused(what: &str) -> IdemError {
    tracing::error!(target: "pg_idem_http", "the handler tried to {what} the claim's transaction; only the layer ends it");
    IdemError::internal()
}

impl std::ops::Deref for Idem {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn
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

// axum's idiom: a handler's error is the Response to send
#[allow(clippy::result_large_err)]
impl IdemLayer {
    /// The pool this route uses (its outcome counters: `layer.pool().outcomes()`).
    pub fn pool(&self) -> &Pool {
        &self.cfg.pool
    }

    pub(crate) fn statements(&self) -> Result<&Statements, IdemError> {
        // build() located them; a layer is never made without
        self.cfg.statements()
    }

    /// The request's tenant, key, scope and normalised target, or the answer that refuses it
    /// (`tenant_missing`, `key_missing`, `key_invalid`, or the tenant hook's), counted `rejected`.
    pub fn scope(&self, parts: &Parts, body: Bytes) -> Result<Scope, Response> {
        let cfg = &self.cfg;
        let reject = |response: Response| {
            cfg.pool
                .outcomes()
                .record("rejected", "refused before any claim");
            response
        };
        let tenant = match (&cfg.tenant, &cfg.single_tenant) {
            (Some(hook), _) => match hook(parts) {
                Ok(Some(tenant)) if !tenant.is_empty() => tenant,
                Ok(_) => return Err(reject(cfg.error(IdemError::new("tenant_missing")))),
                Err(response) => return Err(reject(*response)),
            },
            (None, Some(tenant)) => tenant.clone(),
            (None, None) => return Err(reject(cfg.error(IdemError::internal()))),
        };
        let mut values = parts.headers.get_all(&cfg.key_header).iter();
        let key = match (values.next(), values.next()) {
            (None, _) => None,
            // one key per request: several header lines are malformed
            (Some(raw), None) => match parse_key(raw.as_bytes()) {
                Some(key) => Some(key),
                None => return Err(reject(cfg.error(IdemError::new("key_invalid")))),
            },
            (Some(_), Some(_)) => return Err(reject(cfg.error(IdemError::new("key_invalid")))),
        };
        if key.is_none() && cfg.key_required {
            return Err(reject(cfg.error(IdemError::new("key_missing"))));
        }
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
        // the target as received: under a nested router axum keeps it in OriginalUri
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(&parts.uri, |o| &o.0);
        let raw = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
        Ok(Scope {
            tenant,
            key,
            method,
            route,
            target: normalize_target(raw.as_bytes()),
            body,
        })
    }

    /// The claim statement in `tx`, a transaction the caller opened (and ends: roll it back
    /// unless the claim [`Claim::is_claimed`]). Counts `claimed`, or the outcome that answers.
    pub async fn claim(
        &self,
        tx: &(impl GenericClient + Sync),
        scope: &Scope,
    ) -> Result<Claim, Response> {
        let cfg = &self.cfg;
        let outcomes = cfg.pool.outcomes();
        let Some(key) = &scope.key else {
            outcomes.record("rejected", "no key");
            return Err(cfg.error(IdemError::new("key_missing")));
        };
        let statements = self.statements().map_err(|e| cfg.error(e))?;
        match claim(cfg, statements, tx, scope, key).await {
            Ok(claim) if claim.is_claimed() => {
                outcomes.record("claimed", &claim.scoped_key);
                Ok(claim)
            }
            Ok(claim) => {
                outcomes.record(RouteConfig::unclaimed_outcome(&claim), &claim.scoped_key);
                Ok(claim)
            }
            Err(err) => {
                // the database refused or failed the claim (a key too long is its refusal too)
                outcomes.record("database_error", err.message());
                Err(cfg.error(err))
            }
        }
    }

    /// The answer to a claim that is not `claimed` (a replay, 409, 422, 400).
    pub fn answer(&self, claim: &Claim) -> Response {
        self.cfg.unclaimed(claim)
    }

    /// Stores a final response (`complete` or `fail_final`, by status) with the claim, in the
    /// claim's transaction `tx`; the caller then commits and only then sends the response.
    /// A non-final status stores nothing (roll back). `Err`: roll back and send the `Err`; a
    /// `tx` that is no longer the claim's transaction is 500, outcome `transaction_ended`.
    pub async fn complete(
        &self,
        tx: &(impl GenericClient + Sync),
        scope: &Scope,
        claim: &Claim,
        parts: &http::response::Parts,
        body: &Bytes,
    ) -> Result<(), Response> {
        self.cfg
            .store_response(tx, scope, claim, parts, body)
            .await?;
        // counted here: the commit that follows is the caller's
        self.cfg.pool.outcomes().record("stored", &claim.scoped_key);
        Ok(())
    }
}

async fn handle<S>(cfg: Arc<RouteConfig>, inner: S, req: Request<Body>) -> Response
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let layer = IdemLayer { cfg };
    let cfg = &layer.cfg;
    let outcomes = cfg.pool.outcomes();
    let (mut parts, body) = req.into_parts();
    let body = match Limited::new(body, cfg.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.is::<LengthLimitError>() => {
            outcomes.record("rejected", "body too large");
            return cfg.error(IdemError::new("payload_too_large"));
        }
        Err(_) => {
            outcomes.record("rejected", "the body could not be read");
            return cfg.error(IdemError::internal());
        }
    };
    let scope = match layer.scope(&parts, body) {
        Ok(scope) => scope,
        Err(response) => return response,
    };
    let conn = match cfg.pool.get().await {
        Ok(conn) => Arc::new(conn),
        Err(err) => {
            outcomes.record("database_error", err.message());
            return cfg.error(err);
        }
    };
    if let Err(err) = conn.run("BEGIN").await {
        let err = IdemError::from_db(&err);
        outcomes.record("database_error", err.message());
        return cfg.error(err);
    }
    let Some(key) = scope.key.clone() else {
        // an optional-key route called without one: a plain transaction, no claim, no outcome
        parts.extensions.insert(Idem {
            conn: Arc::clone(&conn),
            tenant: scope.tenant.clone(),
            key: None,
            scoped_key: None,
            fence: None,
            attempt: None,
        });
        let req = Request::from_parts(parts, Body::from(scope.body.clone()));
        return in_transaction(&layer, conn, None, inner, req).await;
    };
    let claim = match layer.claim(&**conn, &scope).await {
        Ok(claim) => claim,
        Err(response) => {
            let _ = conn.run("ROLLBACK").await;
            return response;
        }
    };
    if !claim.is_claimed() {
        // nothing of ours to keep; a failed ROLLBACK only costs the connection
        let _ = conn.run("ROLLBACK").await;
        return layer.answer(&claim);
    }
    if cfg.lease.is_some() {
        if let Err(err) = conn.run("COMMIT").await {
            let err = IdemError::from_db(&err);
            outcomes.record("database_error", err.message());
            return cfg.error(err);
        }
        drop(conn);
        return lease::run(&layer.cfg, scope, claim, inner, parts).await;
    }
    parts.extensions.insert(Idem {
        conn: Arc::clone(&conn),
        tenant: scope.tenant.clone(),
        key: Some(key),
        scoped_key: Some(claim.scoped_key.clone()),
        fence: claim.fence,
        attempt: claim.attempt,
    });
    let req = Request::from_parts(parts, Body::from(scope.body.clone()));
    in_transaction(&layer, conn, Some((&scope, &claim)), inner, req).await
}

/// Runs the handler inside `conn`'s open transaction; commits (after storing the response with
/// the claim, when there is one) only for a final status, and answers after the commit.
async fn in_transaction<S>(
    layer: &IdemLayer,
    conn: Arc<Conn>,
    claimed: Option<(&Scope, &Claim)>,
    inner: S,
    req: Request<Body>,
) -> Response
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let cfg = &layer.cfg;
    let outcomes = cfg.pool.outcomes();
    let Some((parts, body)) = run_handler(inner, req).await else {
        let _ = conn.run("ROLLBACK").await;
        if claimed.is_some() {
            outcomes.record("rolled_back", "the handler panicked or its body failed");
        }
        return cfg.error(IdemError::internal());
    };
    let Some((scope, claim)) = claimed else {
        if parts.extensions.get::<ErrorMarker>().is_some() || !is_final(parts.status.as_u16()) {
            let _ = conn.run("ROLLBACK").await;
            return cfg.finish(Response::from_parts(parts, Body::from(body)));
        }
        // COMMIT of an aborted transaction (a handler that swallowed an error) reports no
        // error, it rolls back: a statement first makes the abort an error we can see
        let committed = async {
            conn.batch_execute("SELECT 1").await?;
            conn.run("COMMIT").await
        };
        return match committed.await {
            Ok(()) => Response::from_parts(parts, Body::from(body)),
            Err(err) => cfg.error(IdemError::from_db(&err)),
        };
    };
    if let Err(response) = layer
        .cfg
        .store_response(&**conn, scope, claim, &parts, &body)
        .await
    {
        // the session may be in an aborted transaction or gone: a failed ROLLBACK closes it
        let _ = conn.run("ROLLBACK").await;
        return response;
    }
    match conn.run("COMMIT").await {
        Ok(()) => {
            outcomes.record("stored", &claim.scoped_key);
            Response::from_parts(parts, Body::from(body))
        }
        Err(err) => {
            let err = IdemError::from_db(&err);
            outcomes.record("database_error", err.message());
            cfg.error(err)
        }
    }
}
