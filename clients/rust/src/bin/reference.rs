//! The reference app of clients/CONTRACT.md ("The reference apps"), driven by the conformance suite:
//!
//!     pg-idem-http-reference --dsn postgresql://user@127.0.0.1:5432/db --port 8080
//!
//! POST /payments and POST /orders/{order_id}/pay run in transaction mode, POST /payouts in lease
//! mode; GET /_pg_idem/outcomes answers the pool's outcome counts.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http::request::Parts;
use http::{header, HeaderValue, StatusCode};
use pg_idem_http::contract::contract;
use pg_idem_http::core::error_body;
use pg_idem_http::tokio_postgres::types::{ToSql, Type};
use pg_idem_http::tokio_postgres::{Config, NoTls};
use pg_idem_http::{json_response, Idem, IdemError, IdemLayer, Lease, Pool};
use serde_json::Value;

/// (tenant, key) pairs whose injected transient failure has happened, in this process only.
#[derive(Clone)]
struct AppState {
    failed_once: Arc<Mutex<HashSet<(String, String)>>>,
    pool: Pool,
}

/// The request body every route accepts.
struct Order {
    amount: i64,
    sleep_ms: u64,
    fail: Option<String>,
    text: bool,
    set_cookie: bool,
    links: bool,
    commit: Option<String>,
    heartbeat: bool,
}

fn main() {
    let (dsn, port) = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}\nusage: pg-idem-http-reference --dsn POSTGRESQL_URI --port PORT");
            std::process::exit(2);
        }
    };
    // one thread is enough for a test app; the library needs no more of tokio than its runtime
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(err) = runtime.block_on(serve(&dsn, port)) {
        // tokio_postgres's Display says only "db error": its source has the server's message
        let mut message = err.to_string();
        let mut source = std::error::Error::source(&*err);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        eprintln!("pg-idem-http-reference: {message}");
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
    let pool = Pool::new(dsn.parse::<Config>()?, NoTls, 64)?;
    create_tables(&pool).await?;
    let r = &contract().reference_app;
    let payments = IdemLayer::builder(pool.clone())
        .tenant(tenant)
        .stored_headers(r.stored_headers.iter().cloned())
        .timeouts_ms(r.statement_timeout_ms, r.idle_in_transaction_timeout_ms);
    let payouts = payments
        .clone()
        .lease(r.payout_lease.as_str())
        .build()
        .await?;
    let payments = payments.build().await?;
    let app = Router::new()
        .route("/payments", post(payment).layer(payments.clone()))
        .route(&r.order_route, post(order_payment).layer(payments))
        .route("/payouts", post(payout).layer(payouts))
        .route("/_pg_idem/outcomes", get(outcomes))
        .with_state(AppState {
            failed_once: Arc::default(),
            pool,
        });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "listening on http://127.0.0.1:{}",
        listener.local_addr()?.port()
    );
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}

async fn create_tables(pool: &Pool) -> Result<(), Box<dyn std::error::Error>> {
    // CONTRACT.md "The reference apps": the apps' lock, then the tables (named with their
    // schema), in one transaction; a failed try (a connection lost at start) is retried
    let tables = format!(
        "BEGIN; {}; COMMIT;",
        contract().reference_app.tables.join("; ")
    );
    for attempt in 0.. {
        let client = pool.deadpool().get().await?;
        match client.batch_execute(&tables).await {
            Ok(()) => return Ok(()),
            Err(_) if attempt < 3 => {
                drop(pg_idem_http::deadpool_postgres::Object::take(client));
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(err) => {
                // the failed transaction must not go back to the pool
                drop(pg_idem_http::deadpool_postgres::Object::take(client));
                return Err(err.into());
            }
        }
    }
    unreachable!()
}

/// A 400 with a contract-style error body: the handler's final answer (stored and replayed).
struct BadRequest(&'static str, &'static str);

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        json_response(StatusCode::BAD_REQUEST, error_body(self.0, self.1))
    }
}

/// The tenant is the X-Tenant header (missing: the package answers 400 tenant_missing).
fn tenant(parts: &Parts) -> Option<String> {
    let value = parts.headers.get("x-tenant")?.to_str().ok()?;
    Some(value.to_owned())
}

/// The pool's count of each outcome since the app started.
async fn outcomes(State(app): State<AppState>) -> Response {
    let counts: serde_json::Map<String, Value> = app
        .pool
        .outcomes()
        .counts()
        .into_iter()
        .map(|(name, n)| (name.to_owned(), Value::from(n)))
        .collect();
    json_response(StatusCode::OK, Value::Object(counts).to_string())
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
        set_cookie: obj.get("set_cookie").and_then(Value::as_bool) == Some(true),
        links: obj.get("links").and_then(Value::as_bool) == Some(true),
        commit: obj.get("commit").and_then(Value::as_str).map(str::to_owned),
        heartbeat: obj.get("heartbeat").and_then(Value::as_bool) == Some(true),
    })
}

async fn order_payment(
    State(app): State<AppState>,
    Path(order_id): Path<i64>,
    idem: Idem,
    body: Bytes,
) -> Result<Response, IdemError> {
    pay(app, Some(order_id), idem, body).await
}

async fn payment(
    State(app): State<AppState>,
    idem: Idem,
    body: Bytes,
) -> Result<Response, IdemError> {
    pay(app, None, idem, body).await
}

async fn pay(
    app: AppState,
    order_id: Option<i64>,
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
    let params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&tenant, Type::TEXT),
        (&key, Type::TEXT),
        (&order.amount, Type::INT8),
        (&order_id, Type::INT8),
    ];
    let rows = idem
        .query_typed(
            "INSERT INTO public.payments (tenant, idem_key, amount, order_id) VALUES ($1, $2, $3, $4) RETURNING id",
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
    match order.commit.as_deref() {
        // the handle's own API: refused, an error (500) and the insert rolls back
        Some("api") => idem.commit().await?,
        // behind the package's back: it sees the transaction changed and stores nothing
        Some("sql") => idem.batch_execute("COMMIT").await?,
        _ => {}
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
    let mut response = created(format!("/payments/{id}"), content_type, body);
    let headers = response.headers_mut();
    if order.set_cookie {
        headers.append(
            header::SET_COOKIE,
            HeaderValue::from_str(&r.cookie).expect("contract cookie"),
        );
    }
    if order.links {
        for link in &r.links {
            headers.append(
                header::LINK,
                HeaderValue::from_str(link).expect("contract link"),
            );
        }
    }
    Ok(response)
}

async fn payout(lease: Lease, body: Bytes) -> Result<Response, IdemError> {
    let order = match parse(&body) {
        Ok(order) => order,
        Err(bad) => return Ok(bad.into_response()),
    };
    let bank_ref = lease.downstream_key("bank").await?;
    if order.heartbeat {
        lease.heartbeat(None).await?; // by the route's lease
    }
    // the "external call", outside any transaction
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
    let sql = "INSERT INTO public.payouts (tenant, idem_key, amount, attempt) VALUES ($1, $2, $3, $4) RETURNING id";
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
