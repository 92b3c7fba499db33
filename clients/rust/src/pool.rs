//! The connections (a bounded deadpool-postgres pool) and what is learnt once per pool: where
//! pg_idem is (`sql.locate`, or the `schema` option), that its version is recent enough, and so
//! the contract's statements with `{schema}` in place. Also the pool's outcome counters.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, Object, Runtime};
use tokio::sync::OnceCell;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

use crate::contract::contract;
use crate::core::{quote_ident, version_at_least};
use crate::error::IdemError;
use crate::outcome::Outcomes;

/// Why a pool or a layer refuses to start: pg_idem missing, too old or shadowed, the database
/// unreachable, or a configuration the contract forbids. The message says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError(pub(crate) String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pg-idem-http: {}", self.0)
    }
}

impl std::error::Error for StartError {}

/// The contract's statements with pg_idem's schema in place of `{schema}`.
#[derive(Debug)]
pub struct Statements {
    /// pg_idem's schema, quoted as an identifier.
    pub schema: String,
    pub(crate) claim_body: String,
    pub(crate) claim_fields: String,
    pub(crate) complete: String,
    pub(crate) fail_final: String,
    pub(crate) release: String,
    pub(crate) assert_fence: String,
    pub(crate) heartbeat: String,
    pub(crate) checkpoint: String,
    pub(crate) downstream_key: String,
}

impl Statements {
    fn new(schema: String) -> Self {
        let sql = &contract().sql;
        let put = |text: &str| text.replace("{schema}", &schema);
        let claim = |fingerprint: &str| put(&sql.claim.replace("{fingerprint}", fingerprint));
        Statements {
            claim_body: claim(&sql.fingerprint_body),
            claim_fields: claim(&sql.fingerprint_fields),
            complete: put(&sql.complete),
            fail_final: put(&sql.fail_final),
            release: put(&sql.release),
            assert_fence: put(&sql.assert_fence),
            heartbeat: put(&sql.heartbeat),
            checkpoint: put(&sql.checkpoint),
            downstream_key: put(&sql.downstream_key),
            schema,
        }
    }
}

/// A bounded pool of connections to one database with pg_idem. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    pool: deadpool_postgres::Pool,
    schema: Option<String>,
    statements: OnceCell<Statements>,
    outcomes: Outcomes,
}

impl Pool {
    /// From a PostgreSQL URI or key=value string, without TLS, at most 16 connections.
    pub fn from_dsn(dsn: &str) -> Result<Self, StartError> {
        let config = Config::from_str(dsn).map_err(|e| StartError(format!("the DSN: {e}")))?;
        Self::new(config, NoTls, 16)
    }

    /// From a configuration, a TLS connector (`NoTls`, or see [`Pool::from_dsn_rustls`]) and
    /// the largest number of connections. A database that does not answer becomes a 503 after
    /// 5 seconds (connect and wait for a free connection), not a request that hangs.
    pub fn new<T>(mut config: Config, tls: T, max_size: usize) -> Result<Self, StartError>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>
            + Clone
            + Sync
            + Send
            + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        let pool = deadpool_postgres::Pool::builder(Manager::new(config, tls))
            .max_size(max_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| StartError(format!("the pool: {e}")))?;
        Ok(Self::from_deadpool(pool))
    }

    /// Wraps a deadpool-postgres pool the application already has (and may keep using itself).
    pub fn from_deadpool(pool: deadpool_postgres::Pool) -> Self {
        Pool {
            inner: Arc::new(Inner {
                pool,
                schema: None,
                statements: OnceCell::new(),
                outcomes: Outcomes::default(),
            }),
        }
    }

    /// From a URI with TLS through rustls, trusting `tls` (e.g. [`Pool::webpki_roots`]).
    #[cfg(feature = "tls-rustls")]
    pub fn from_dsn_rustls(dsn: &str, tls: rustls::ClientConfig) -> Result<Self, StartError> {
        let config = Config::from_str(dsn).map_err(|e| StartError(format!("the DSN: {e}")))?;
        Self::new(
            config,
            tokio_postgres_rustls::MakeRustlsConnect::new(tls),
            16,
        )
    }

    /// A rustls configuration trusting the Web PKI's roots (what managed services present).
    #[cfg(feature = "tls-rustls")]
    pub fn webpki_roots() -> rustls::ClientConfig {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
    }

    /// pg_idem's schema given instead of found with `sql.locate` (quoted as `quote_ident` does).
    /// Call before the pool's first use.
    pub fn schema(self, name: &str) -> Self {
        Pool {
            inner: Arc::new(Inner {
                pool: self.inner.pool.clone(),
                schema: Some(quote_ident(name)),
                statements: OnceCell::new(),
                outcomes: self.inner.outcomes.clone(),
            }),
        }
    }

    /// The deadpool-postgres pool underneath (for the application's own transactions).
    pub fn deadpool(&self) -> &deadpool_postgres::Pool {
        &self.inner.pool
    }

    /// The count of each outcome of the requests through this pool.
    pub fn outcomes(&self) -> &Outcomes {
        &self.inner.outcomes
    }

    /// The statements, after locating pg_idem and checking its version on the first call (once
    /// per pool). An error says what to do; a later call tries again.
    pub async fn statements(&self) -> Result<&Statements, StartError> {
        self.inner
            .statements
            .get_or_try_init(|| async {
                let client = self.inner.pool.get().await.map_err(|e| {
                    StartError(format!("cannot connect to the database: {e}"))
                })?;
                // one short explicit transaction: a transaction pooler moves nothing in between
                let tx = Transaction::begin(client).await?;
                let schema = match &self.inner.schema {
                    Some(schema) => schema.clone(),
                    None => locate(&tx).await?,
                };
                let statements = Statements::new(schema);
                let min = &contract().min_pg_idem_version;
                let version = tx.version(&statements.schema).await?;
                tx.end().await?;
                if !version_at_least(&version, min) {
                    return Err(StartError(format!(
                        "pg_idem {version} is installed; this package needs {min} or later (ALTER EXTENSION pg_idem UPDATE, or install the newer SQL edition)"
                    )));
                }
                Ok(statements)
            })
            .await
    }

    /// The statements if [`Pool::statements`] succeeded before.
    pub(crate) fn statements_now(&self) -> Option<&Statements> {
        self.inner.statements.get()
    }

    /// A connection, closed instead of reused unless its transaction ended cleanly.
    pub(crate) async fn get(&self) -> Result<Conn, IdemError> {
        let obj = self.inner.pool.get().await.map_err(IdemError::from_pool)?;
        Ok(Conn {
            obj: Some(obj),
            clean: AtomicBool::new(false),
        })
    }
}

/// `sql.locate`'s answer: pg_idem's schema, unless it is missing or shadowed.
async fn locate(tx: &Transaction) -> Result<String, StartError> {
    let rows = tx
        .client()
        .query_typed(&contract().sql.locate, &[])
        .await
        .map_err(startup_db_error)?;
    let Some(row) = rows.first() else {
        return Err(StartError(
            "pg_idem is not installed in this database (CREATE EXTENSION pg_idem, or install its SQL edition)".into(),
        ));
    };
    let schema: String = row.try_get("schema").map_err(startup_db_error)?;
    let foreign: Option<String> = row.try_get("foreign_functions").map_err(startup_db_error)?;
    if let Some(foreign) = foreign {
        return Err(StartError(format!(
            "schema {schema} holds idem_* functions that are not pg_idem's (another role's): {foreign}; drop them or revoke that role's CREATE on {schema}"
        )));
    }
    Ok(schema)
}

fn startup_db_error(err: tokio_postgres::Error) -> StartError {
    match err.as_db_error() {
        Some(db) => StartError(format!("{} {}", db.code().code(), db.message())),
        None => StartError(err.to_string()),
    }
}

/// The startup checks' transaction. Dropped without [`Transaction::end`] (a check failed), its
/// connection is closed rather than returned inside the transaction.
struct Transaction {
    client: Option<Object>,
}

impl Transaction {
    async fn begin(client: Object) -> Result<Self, StartError> {
        let tx = Transaction {
            client: Some(client),
        };
        tx.client()
            .batch_execute("BEGIN")
            .await
            .map_err(startup_db_error)?;
        Ok(tx)
    }

    fn client(&self) -> &Object {
        self.client.as_ref().expect("present until end or drop")
    }

    /// `sql.version`; no `idem_version()` at all (42883) is a release older than the minimum.
    async fn version(&self, schema: &str) -> Result<String, StartError> {
        let sql = contract().sql.version.replace("{schema}", schema);
        let rows = match self.client().query_typed(&sql, &[]).await {
            Ok(rows) => rows,
            Err(err) if err.code() == Some(&SqlState::UNDEFINED_FUNCTION) => {
                let min = &contract().min_pg_idem_version;
                return Err(StartError(format!(
                    "pg_idem in schema {schema} has no idem_version(): it is older than {min}, which this package needs (ALTER EXTENSION pg_idem UPDATE, or install the newer SQL edition)"
                )));
            }
            Err(err) => return Err(startup_db_error(err)),
        };
        rows.first()
            .ok_or_else(|| StartError(format!("no row from {sql}")))?
            .try_get(0)
            .map_err(startup_db_error)
    }

    async fn end(mut self) -> Result<(), StartError> {
        let client = self.client.take().expect("present until end or drop");
        match client.batch_execute("COMMIT").await {
            Ok(()) => Ok(()),
            Err(err) => {
                drop(Object::take(client));
                Err(startup_db_error(err))
            }
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

/// A pooled connection shared by the layer and the handler's handle. It goes back to the pool
/// only after a COMMIT or ROLLBACK that succeeded; otherwise dropping it closes the session, so
/// the server rolls back whatever it held (a cancelled request, a failed ROLLBACK).
pub(crate) struct Conn {
    obj: Option<Object>,
    clean: AtomicBool,
}

impl Conn {
    /// Runs `sql` (BEGIN/COMMIT/ROLLBACK) with the simple query protocol.
    pub(crate) async fn run(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.clean.store(false, Ordering::SeqCst);
        self.batch_execute(sql).await?;
        // only a completed COMMIT or ROLLBACK leaves the session outside any transaction
        self.clean
            .store(sql == "COMMIT" || sql == "ROLLBACK", Ordering::SeqCst);
        Ok(())
    }
}

impl Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.obj.as_ref().expect("present until drop")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(obj) = self.obj.take() {
            if !self.clean.load(Ordering::SeqCst) {
                // taken out of the pool: dropping the client closes the session
                drop(Object::take(obj));
            }
        }
    }
}
