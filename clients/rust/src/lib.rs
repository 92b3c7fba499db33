//! Idempotency-Key HTTP middleware for axum on top of pg_idem: exactly-once effects decided by
//! PostgreSQL, with the behaviour of `clients/CONTRACT.md` (shared with the Python and Node
//! packages, so one service's stored response replays byte for byte from another's).
//!
//! ```no_run
//! use axum::{routing::post, Router};
//! use pg_idem_http::{Idem, IdemError, IdemLayer, Pool};
//!
//! async fn create(idem: Idem) -> Result<String, IdemError> {
//!     // runs inside the transaction that claimed the key
//!     let rows = idem.query_typed("SELECT 1::int4", &[]).await?;
//!     Ok(rows[0].get::<_, i32>(0).to_string())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::from_dsn("postgresql://app@127.0.0.1/app")?;
//! let layer = IdemLayer::builder(pool).single_tenant("acme").build().await?;
//! let app: Router = Router::new().route("/things", post(create).layer(layer));
//! # Ok(()) }
//! ```

pub mod contract;
pub mod core;
mod error;
mod layer;
mod lease;
mod outcome;
mod pool;
mod route;

pub use crate::error::{json_response, IdemError};
pub use crate::layer::{Idem, IdemLayer, IdemLayerBuilder, IdemService};
pub use crate::lease::{Lease, LeaseTx};
pub use crate::outcome::Outcomes;
pub use crate::pool::{Pool, StartError, Statements};
pub use crate::route::{Claim, Scope};
/// The driver and pool this crate runs on, for the application's own transactions.
pub use {deadpool_postgres, tokio_postgres};

#[cfg(test)]
mod tests;

// the README's examples compile (as doctests)
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
