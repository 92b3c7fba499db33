//! The contract's errors as one Rust error type that is also an axum response.

use std::fmt;

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

use crate::contract::contract;
use crate::core::{error_body, error_name_for_sqlstate, static_name};

/// One of the contract's `errors`. Handlers return it (`?` on a `tokio_postgres::Error` maps the
/// SQLSTATE): its response is never stored, even where its status would be final, because the
/// transaction it came from is not one to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemError {
    name: &'static str,
    message: String,
    retry_after: Option<u32>,
}

/// Marks a response as an [`IdemError`]: the layer rolls back and, where the error takes a
/// `Retry-After` the route did not choose, puts the route's default there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorMarker {
    pub name: &'static str,
    pub default_retry_after: bool,
}

impl IdemError {
    /// The error `name` of the contract with its fixed message (an unknown name is `internal_error`).
    pub fn new(name: &str) -> Self {
        let name = static_name(name);
        let message = contract().errors[name].message.clone().unwrap_or_default();
        IdemError {
            name,
            message,
            retry_after: None,
        }
    }

    pub fn internal() -> Self {
        Self::new("internal_error")
    }

    /// The mapping of a database error; `invalid_request` carries the database's own message.
    pub fn from_db(err: &tokio_postgres::Error) -> Self {
        let db = err.as_db_error();
        let name = error_name_for_sqlstate(db.map(|d| d.code().code()));
        if name == "internal_error" || (name == "unavailable" && db.is_none()) {
            // tokio_postgres's Display says only "db error": name the SQLSTATE and the message
            match db {
                Some(db) => tracing::error!(
                    target: "pg_idem_http",
                    error = name,
                    sqlstate = db.code().code(),
                    "{}",
                    db.message()
                ),
                None => tracing::error!(target: "pg_idem_http", error = name, "{err}"),
            }
        }
        match (name, db) {
            ("invalid_request", Some(db)) => IdemError {
                message: db.message().to_owned(),
                ..Self::new(name)
            },
            _ => Self::new(name),
        }
    }

    /// A connection the pool could not give: its database error, or `unavailable` (timed out).
    pub fn from_pool(err: deadpool_postgres::PoolError) -> Self {
        match err {
            deadpool_postgres::PoolError::Backend(err) => Self::from_db(&err),
            other => {
                tracing::error!(target: "pg_idem_http", error = "unavailable", "{other}");
                Self::new("unavailable")
            }
        }
    }

    /// Sets the `Retry-After` seconds (for errors whose contract entry has `retry_after`).
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(contract().errors[self.name].status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<tokio_postgres::Error> for IdemError {
    fn from(err: tokio_postgres::Error) -> Self {
        Self::from_db(&err)
    }
}

impl fmt::Display for IdemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for IdemError {}

impl From<deadpool_postgres::PoolError> for IdemError {
    fn from(err: deadpool_postgres::PoolError) -> Self {
        Self::from_pool(err)
    }
}

impl IntoResponse for IdemError {
    fn into_response(self) -> Response {
        let mut response = json_response(self.status(), error_body(self.name, &self.message));
        let takes_retry_after = contract().errors[self.name].retry_after;
        if takes_retry_after {
            let seconds = self
                .retry_after
                .unwrap_or(contract().defaults.retry_after_seconds);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response.extensions_mut().insert(ErrorMarker {
            name: self.name,
            default_retry_after: takes_retry_after && self.retry_after.is_none(),
        });
        response
    }
}

/// A response with a JSON body given as text (written as is: no re-serialisation).
pub fn json_response(status: StatusCode, body: impl Into<String>) -> Response {
    let mut response = Response::new(axum::body::Body::from(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
