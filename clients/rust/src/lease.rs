//! Lease mode: for a handler that calls other services. The claim is committed at once, the
//! handler runs outside any transaction, and its result is stored under the fence in a
//! completion transaction, which fails with 409 `lease_lost` when another attempt took over.

use std::convert::Infallible;
use std::ops::Deref;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::response::Response;
use http::request::Parts;
use http::Request;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};
use tower::Service;

use crate::core::is_final;
use crate::error::{ErrorMarker, IdemError};
use crate::pool::Conn;
use crate::route::{run_handler, Claim, RouteConfig, Scope};

/// What the handler of a lease-mode route gets (an axum extractor). Cheap to clone.
#[derive(Clone)]
pub struct Lease {
    inner: Arc<LeaseInner>,
}

struct LeaseInner {
    cfg: Arc<RouteConfig>,
    tenant: String,
    key: String,
    scoped_key: String,
    fence: i64,
    attempt: i32,
    checkpoint_phase: Option<String>,
    checkpoint_data: Option<String>,
    /// The completion transaction, once opened (by [`Lease::begin`] or by the layer).
    tx: Mutex<Option<Arc<Conn>>>,
}

/// The completion transaction's connection (`Deref` to `tokio_postgres::Client`), under the fence.
#[derive(Clone)]
pub struct LeaseTx {
    conn: Arc<Conn>,
}

impl Deref for LeaseTx {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn
    }
}

impl Lease {
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }
    pub fn key(&self) -> &str {
        &self.inner.key
    }
    pub fn scoped_key(&self) -> &str {
        &self.inner.scoped_key
    }
    pub fn fence(&self) -> i64 {
        self.inner.fence
    }
    /// 1 on the first attempt; higher after a takeover of an expired lease.
    pub fn attempt(&self) -> i32 {
        self.inner.attempt
    }
    /// What an earlier attempt saved with [`Lease::checkpoint`]: resume from there.
    pub fn checkpoint_phase(&self) -> Option<&str> {
        self.inner.checkpoint_phase.as_deref()
    }
    pub fn checkpoint_data(&self) -> Option<Value> {
        self.inner
            .checkpoint_data
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
    }

    /// The same UUID on every attempt of this key: send it as the external call's idempotency key.
    pub async fn downstream_key(&self, step: &str) -> Result<String, IdemError> {
        let step = step.to_owned();
        let row = self
            .short(|s| &s.downstream_key, &[(&step, Type::TEXT)])
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Saves progress under the fence (its own short transaction).
    pub async fn checkpoint(&self, phase: &str, data: &Value) -> Result<(), IdemError> {
        let (phase, data, fence) = (phase.to_owned(), data.to_string(), self.inner.fence);
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&fence, Type::INT8),
            (&phase, Type::TEXT),
            (&data, Type::TEXT),
        ];
        self.short(|s| &s.checkpoint, &params).await.map(drop)
    }

    /// Extends the lease (by `lease`, else by the route's lease) under the fence; returns when
    /// it now expires. The route's lease is sent, not NULL: NULL is the database's own default
    /// (`pg_idem.lease_timeout`), which would shorten a route's longer lease.
    pub async fn heartbeat(&self, lease: Option<&str>) -> Result<SystemTime, IdemError> {
        let lease = lease
            .map(str::to_owned)
            .or_else(|| self.inner.cfg.lease.clone());
        let fence = self.inner.fence;
        let params: [(&(dyn ToSql + Sync), Type); 2] = [(&fence, Type::INT8), (&lease, Type::TEXT)];
        let row = self.short(|s| &s.heartbeat, &params).await?;
        Ok(row.try_get(0)?)
    }

    /// Opens the completion transaction (once; later calls return the same one) after checking
    /// the fence, for the handler's business writes. 409 `lease_lost` when another attempt took over.
    pub async fn begin(&self) -> Result<LeaseTx, IdemError> {
        let mut slot = self.inner.tx.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(LeaseTx {
                conn: Arc::clone(conn),
            });
        }
        let conn = Arc::new(self.inner.cfg.pool.get().await?);
        conn.run("BEGIN").await?;
        let statements = self.inner.cfg.statements()?;
        let fence = self.inner.fence;
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&self.inner.tenant, Type::TEXT),
            (&self.inner.scoped_key, Type::TEXT),
            (&fence, Type::INT8),
        ];
        conn.query_typed(&statements.assert_fence, &params).await?;
        let tx = LeaseTx {
            conn: Arc::clone(&conn),
        };
        *slot = Some(conn);
        Ok(tx)
    }

    /// One statement in a transaction of its own, with `$1` tenant and `$2` scoped key before `rest`.
    async fn short(
        &self,
        sql: impl Fn(&crate::pool::Statements) -> &String,
        rest: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Row, IdemError> {
        let sql = sql(self.inner.cfg.statements()?);
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
            (&self.inner.tenant, Type::TEXT),
            (&self.inner.scoped_key, Type::TEXT),
        ];
        params.extend(rest.iter().cloned());
        let conn = self.inner.cfg.pool.get().await?;
        conn.run("BEGIN").await?;
        let mut rows = conn.query_typed(sql, &params).await?;
        conn.run("COMMIT").await?;
        rows.pop().ok_or_else(IdemError::internal)
    }

    /// The completion transaction, opened now if the handler did not.
    async fn take_tx(&self) -> Result<Arc<Conn>, IdemError> {
        if let Some(conn) = self.inner.tx.lock().await.take() {
            return Ok(conn);
        }
        let conn = Arc::new(self.inner.cfg.pool.get().await?);
        conn.run("BEGIN").await?;
        // no assert_fence: complete/fail_final check the fence themselves
        Ok(conn)
    }

    /// Gives the key up after a transient failure, so the retry is claimed at once.
    async fn release(&self) {
        if let Err(err) = self
            .short(|s| &s.release, &[(&self.inner.fence, Type::INT8)])
            .await
        {
            tracing::error!(target: "pg_idem_http", "release of {:?} failed: {err}", self.inner.scoped_key);
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Lease {
    type Rejection = IdemError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, IdemError> {
        // missing only when the route has no IdemLayer with a lease: a programming error
        parts
            .extensions
            .get::<Lease>()
            .cloned()
            .ok_or_else(IdemError::internal)
    }
}

/// The rest of a lease-mode request, after its claim was committed.
pub(crate) async fn run<S>(
    cfg: &Arc<RouteConfig>,
    scope: Scope,
    claim: Claim,
    inner: S,
    mut parts: Parts,
) -> Response
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    let outcomes = cfg.pool.outcomes();
    let Some(fence) = claim.fence else {
        outcomes.record("database_error", "a claim without a fence");
        return cfg.error(IdemError::internal());
    };
    let lease = Lease {
        inner: Arc::new(LeaseInner {
            cfg: Arc::clone(cfg),
            tenant: scope.tenant.clone(),
            key: scope.key.clone().unwrap_or_default(),
            scoped_key: claim.scoped_key.clone(),
            fence,
            attempt: claim.attempt.unwrap_or(1),
            checkpoint_phase: claim.checkpoint_phase.clone(),
            checkpoint_data: claim.checkpoint_data.clone(),
            tx: Mutex::new(None),
        }),
    };
    parts.extensions.insert(lease.clone());
    let req = Request::from_parts(parts, Body::from(scope.body.clone()));
    let outcome = run_handler(inner, req).await;
    let (parts, body) = match outcome {
        Some((p, b))
            if p.extensions.get::<ErrorMarker>().is_none() && is_final(p.status.as_u16()) =>
        {
            (p, b)
        }
        // a panic, an error or a non-final status: nothing is stored, the retry runs again
        other => {
            let response = outcome_response(cfg, other);
            let lost = is_lease_lost(&response);
            let name = if lost { "lease_lost" } else { "rolled_back" };
            outcomes.record(name, "nothing stored");
            return abandon(&lease, response).await;
        }
    };
    // completion: the transaction the handler opened (under assert_fence), or a new one, where
    // complete/fail_final check the fence themselves
    let conn = match lease.take_tx().await {
        Ok(conn) => conn,
        Err(err) => {
            outcomes.record("database_error", err.message());
            return abandon(&lease, cfg.error(err)).await;
        }
    };
    // a lease-mode claim has no transaction to guard: its claim was committed already
    let claim = Claim {
        txid: None,
        ..claim
    };
    if let Err(response) = cfg
        .store_response(&**conn, &scope, &claim, &parts, &body)
        .await
    {
        let _ = conn.run("ROLLBACK").await;
        return abandon(&lease, response).await;
    }
    match conn.run("COMMIT").await {
        Ok(()) => {
            outcomes.record("stored", &claim.scoped_key);
            Response::from_parts(parts, Body::from(body))
        }
        Err(err) => {
            let err = IdemError::from_db(&err);
            outcomes.record(
                if err.name() == "lease_lost" {
                    "lease_lost"
                } else {
                    "database_error"
                },
                err.message(),
            );
            abandon(&lease, cfg.error(err)).await
        }
    }
}

fn is_lease_lost(response: &Response) -> bool {
    response
        .extensions()
        .get::<ErrorMarker>()
        .is_some_and(|m| m.name == "lease_lost")
}

fn outcome_response(
    cfg: &RouteConfig,
    outcome: Option<(http::response::Parts, bytes::Bytes)>,
) -> Response {
    match outcome {
        Some((parts, body)) => cfg.finish(Response::from_parts(parts, Body::from(body))),
        None => cfg.error(IdemError::internal()),
    }
}

/// Rolls the completion transaction back and releases the key, unless the key is no longer ours.
async fn abandon(lease: &Lease, response: Response) -> Response {
    if let Some(conn) = lease.inner.tx.lock().await.take() {
        let _ = conn.run("ROLLBACK").await;
    }
    if !is_lease_lost(&response) {
        lease.release().await;
    }
    response
}
