//! A deliberately tiny connection pool: idle connections in a `Vec`, a new one when none is
//! idle, and any connection whose transaction did not end cleanly is dropped instead of reused
//! (dropping it closes the session, so the server rolls back whatever it held).

use std::ops::Deref;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// Connections to one database (NoTls). Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    idle: Mutex<Vec<Client>>,
    max_idle: usize,
}

impl Pool {
    pub fn new(mut config: Config) -> Self {
        // a database that does not answer must become a 503, not a request that hangs
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        Pool {
            inner: Arc::new(Inner {
                config,
                idle: Mutex::new(Vec::new()),
                max_idle: 16,
            }),
        }
    }

    /// From a PostgreSQL URI or key=value string.
    pub fn from_dsn(dsn: &str) -> Result<Self, tokio_postgres::Error> {
        Ok(Self::new(Config::from_str(dsn)?))
    }

    /// How many idle connections are kept (16 unless set).
    pub fn max_idle(self, max_idle: usize) -> Self {
        let inner = Inner {
            config: self.inner.config.clone(),
            idle: Mutex::new(Vec::new()),
            max_idle,
        };
        Pool {
            inner: Arc::new(inner),
        }
    }

    /// An idle connection, or a new one. It goes back to the pool only when marked clean.
    pub async fn get(&self) -> Result<PooledClient, tokio_postgres::Error> {
        let reused = {
            let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            std::iter::from_fn(|| idle.pop()).find(|c| !c.is_closed())
        };
        let client = match reused {
            Some(client) => client,
            None => {
                let (client, connection) = self.inner.config.connect(NoTls).await?;
                tokio::spawn(async move {
                    // ends when the client is dropped or the server goes away
                    let _ = connection.await;
                });
                client
            }
        };
        Ok(PooledClient {
            client: Some(Arc::new(client)),
            pool: self.clone(),
            clean: false,
        })
    }

    fn put(&self, client: Client) {
        let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.inner.max_idle && !client.is_closed() {
            idle.push(client);
        }
    }
}

/// A connection taken from a [`Pool`]. It is shared (`Arc`) with the handler that runs inside its
/// transaction; it returns to the pool when it was marked clean and nobody else holds it.
pub struct PooledClient {
    client: Option<Arc<Client>>,
    pool: Pool,
    clean: bool,
}

impl PooledClient {
    pub(crate) fn shared(&self) -> Arc<Client> {
        Arc::clone(self.client.as_ref().expect("present until drop"))
    }

    /// Runs `sql` (BEGIN/COMMIT/ROLLBACK) with the simple query protocol.
    pub(crate) async fn run(&mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.clean = false;
        self.batch_execute(sql).await?;
        // only a completed COMMIT or ROLLBACK leaves the session outside any transaction
        self.clean = sql == "COMMIT" || sql == "ROLLBACK";
        Ok(())
    }

    /// Declares the session idle outside any transaction (for callers using it directly).
    pub fn mark_clean(&mut self) {
        self.clean = true;
    }
}

impl Deref for PooledClient {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until drop")
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            if self.clean {
                if let Ok(client) = Arc::try_unwrap(client) {
                    self.pool.put(client);
                }
            }
        }
    }
}
