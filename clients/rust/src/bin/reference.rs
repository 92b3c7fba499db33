//! The reference app of clients/CONTRACT.md ("The reference apps"), driven by the conformance suite:
//!
//!     pg-idem-http-reference --dsn postgresql://user@127.0.0.1:5432/db --port 8080
//!
//! POST /payments runs in transaction mode, POST /payouts in lease mode.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http::request::Parts;
use http::{header, HeaderValue, StatusCode};
use pg_idem_http::contract::contract;
use pg_idem_http::core::error_body;
use pg_idem_http::{json_response, Idem, IdemError, IdemLayer, Lease, Pool};
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};

const TABLES: &str = "BEGIN;
CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, tenant text NOT NULL, idem_key text NOT NULL, amount bigint NOT NULL);
CREATE TABLE IF NOT EXISTS payouts (id bigserial PRIMARY KEY, tenant text NOT NULL, idem_key text NOT NULL, amount bigint NOT NULL, attempt integer NOT NULL);
COMMIT;";

/// (tenant, key) pairs whose injected transient failure has happened, in this process only.
#[derive(Clone, Default)]
struct AppState {
    failed_once: Arc<Mutex<HashSet<(String, String)>>>,
}

/// The request body every route accepts.
struct Order {
    amount: i64,
    sleep_ms: u64,
    fail: Option<String>,
    text: bool,
}

#[tokio::main]
async fn main() {
    let (dsn, port) = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}\nusage: pg-idem-http-reference --dsn POSTGRESQL_URI --port PORT");
            std::process::exit(2);
        }
    };
    if let Err(err) = serve(&dsn, port).await {
        eprintln!("pg-idem-http-reference: {err}");
        std::process::exit(1);
    }
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(String, u16), String> {
    let (mut dsn, mut port) = (None, None);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--dsn" => dsn = Some(value),
            "--port" => port = Some(value.parse::<u16>().map_err(|e| format!("--port: {e}"))?),
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok((
        dsn.ok_or("--dsn is required")?,
        port.ok_or("--port is required")?,
    ))
}

async fn serve(dsn: &str, port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let pool = Pool::from_dsn(dsn)?;
    create_tables(&pool).await?;
    let r = &contract().reference_app;
    let payments = IdemLayer::new(pool)
        .tenant(tenant)
        .timeouts_ms(r.statement_timeout_ms, r.idle_in_transaction_timeout_ms);
    let payouts = payments.clone().lease(r.payout_lease.as_str());
    let app = Router::new()
        .route("/payments", post(payment).layer(payments))
        .route("/payouts", post(payout).layer(payouts))
        .with_state(AppState::default());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "listening on http://127.0.0.1:{}",
        listener.local_addr()?.port()
    );
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}

async fn create_tables(pool: &Pool) -> Result<(), tokio_postgres::Error> {
    // two apps starting at once may race on CREATE TABLE IF NOT EXISTS: the second try sees the table
    for attempt in 0.. {
        let mut client = pool.get().await?;
        match client.batch_execute(TABLES).await {
            Ok(()) => {
                client.mark_clean();
                return Ok(());
            }
            Err(_) if attempt < 3 => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(err) => return Err(err),
        }
    }
    unreachable!()
}

/// A 400 with a contract-style error body. From `parse` it is the handler's final answer (stored
/// and replayed); from the tenant hook it comes before any claim.
struct BadRequest(&'static str, &'static str);

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        json_response(StatusCode::BAD_REQUEST, error_body(self.0, self.1))
    }
}

/// The tenant is the X-Tenant header.
fn tenant(parts: &Parts) -> Result<String, BadRequest> {
    match parts.headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
        Some(tenant) if !tenant.is_empty() => Ok(tenant.to_owned()),
        _ => Err(BadRequest("tenant_missing", "X-Tenant header required")),
    }
}

fn parse(body: &[u8]) -> Result<Order, BadRequest> {
    let bad = || {
        BadRequest(
            "bad_request",
            "body must be a JSON object with an integer amount",
        )
    };
    let value: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    let obj = value.as_object().ok_or_else(bad)?;
    Ok(Order {
        amount: obj.get("amount").and_then(Value::as_i64).ok_or_else(bad)?,
        sleep_ms: obj.get("sleep_ms").and_then(Value::as_u64).unwrap_or(0),
        fail: obj.get("fail").and_then(Value::as_str).map(str::to_owned),
        text: obj.get("format").and_then(Value::as_str) == Some("text"),
    })
}

async fn payment(
    State(app): State<AppState>,
    idem: Idem,
    body: Bytes,
) -> Result<Response, IdemError> {
    let order = match parse(&body) {
        Ok(order) => order,
        Err(bad) => return Ok(bad.into_response()),
    };
    let r = &contract().reference_app;
    let amount = order.amount.to_string();
    if order.fail.as_deref() == Some("final") {
        return Ok(json_response(
            StatusCode::PAYMENT_REQUIRED,
            r.declined_json.replace("{amount}", &amount),
        ));
    }
    let (tenant, key) = (
        idem.tenant().to_owned(),
        idem.key().unwrap_or_default().to_owned(),
    );
    let params: [(&(dyn ToSql + Sync), Type); 3] = [
        (&tenant, Type::TEXT),
        (&key, Type::TEXT),
        (&order.amount, Type::INT8),
    ];
    let rows = idem
        .query_typed(
            "INSERT INTO payments (tenant, idem_key, amount) VALUES ($1, $2, $3) RETURNING id",
            &params,
        )
        .await?;
    let id: i64 = rows[0].try_get(0)?;
    tokio::time::sleep(Duration::from_millis(order.sleep_ms)).await;
    if order.fail.as_deref() == Some("transient")
        && app.failed_once.lock().unwrap().insert((tenant, key))
    {
        // the Rust analogue of an unhandled exception: the layer catches the unwinding, rolls the
        // insert and the claim back and answers 500
        panic!("injected transient failure");
    }
    let body = if order.text {
        &r.payment_text
    } else {
        &r.payment_json
    };
    let body = body
        .replace("{id}", &id.to_string())
        .replace("{amount}", &amount);
    let content_type = if order.text {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    Ok(created(format!("/payments/{id}"), content_type, body))
}

async fn payout(lease: Lease, body: Bytes) -> Result<Response, IdemError> {
    let order = match parse(&body) {
        Ok(order) => order,
        Err(bad) => return Ok(bad.into_response()),
    };
    let bank_ref = lease.downstream_key("bank").await?;
    // the "external call", outside any transaction and without a heartbeat
    tokio::time::sleep(Duration::from_millis(order.sleep_ms)).await;
    let tx = lease.begin().await?;
    let attempt = lease.attempt();
    let (tenant, key) = (lease.tenant().to_owned(), lease.key().to_owned());
    let params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&tenant, Type::TEXT),
        (&key, Type::TEXT),
        (&order.amount, Type::INT8),
        (&attempt, Type::INT4),
    ];
    let sql = "INSERT INTO payouts (tenant, idem_key, amount, attempt) VALUES ($1, $2, $3, $4) RETURNING id";
    let id: i64 = tx.query_typed(sql, &params).await?[0].try_get(0)?;
    let body = contract()
        .reference_app
        .payout_json
        .replace("{id}", &id.to_string())
        .replace("{amount}", &order.amount.to_string())
        .replace("{attempt}", &attempt.to_string())
        .replace("{bank_ref}", &bank_ref);
    Ok(created(format!("/payouts/{id}"), "application/json", body))
}

fn created(location: String, content_type: &'static str, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::CREATED;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(&location).expect("a path is a header value"),
    );
    response
}
