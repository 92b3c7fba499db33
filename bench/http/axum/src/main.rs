//! POST /payments with the glue written by hand (what a team writes without the package): the
//! same claim, insert and completion as clients/rust's reference app, for
//! bench/runners/http_middleware.py.
//!
//!     handwritten-axum --dsn DSN --port PORT

use std::str::FromStr;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::{json, Value};
use tokio_postgres::types::Type;
use tokio_postgres::NoTls;

fn reply(status: u16, body: &Value, headers: &[(&'static str, String)]) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

async fn payments(State(pool): State<Pool>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(key), Some(tenant)) = (header("idempotency-key"), header("x-tenant")) else {
        return reply(400, &json!({"error": "key_missing"}), &[]);
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return reply(400, &json!({"error": "bad_request"}), &[]);
    };
    let Some(amount) = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["amount"].as_i64())
    else {
        return reply(400, &json!({"error": "bad_request"}), &[]);
    };
    match handle(&pool, &tenant, &key, text, amount).await {
        Ok(response) => response,
        Err(_) => reply(500, &json!({"error": "internal_error"}), &[]),
    }
}

async fn handle(
    pool: &Pool,
    tenant: &str,
    key: &str,
    text: &str,
    amount: i64,
) -> Result<Response, Box<dyn std::error::Error>> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // query_typed: one round trip and no named statement, as the package runs its statements
    let claim = tx
        .query_typed(
            "SELECT outcome, fence, response_code, response_body FROM idem_claim($1, $2, \
             idem_request_hash('POST', '/payments', $3::jsonb))",
            &[
                (&tenant, Type::TEXT),
                (&key, Type::TEXT),
                (&text, Type::TEXT),
            ],
        )
        .await?
        .pop()
        .ok_or("idem_claim returned no row")?;
    let outcome: String = claim.get(0);
    let response = match outcome.as_str() {
        "completed" | "failed" => {
            let code: i32 = claim.get(2);
            let stored: Option<Value> = claim.get(3);
            reply(
                code as u16,
                &stored.unwrap_or(Value::Null),
                &[("idempotent-replayed", "true".into())],
            )
        }
        "in_progress" => reply(
            409,
            &json!({"error": "in_progress"}),
            &[("retry-after", "1".into())],
        ),
        "claimed" => {
            let fence: i64 = claim.get(1);
            let row = tx
                .query_typed(
                    "INSERT INTO payments (tenant, idem_key, amount) VALUES ($1, $2, $3) RETURNING id",
                    &[(&tenant, Type::TEXT), (&key, Type::TEXT), (&amount, Type::INT8)],
                )
                .await?
                .pop()
                .ok_or("INSERT returned no row")?;
            let id: i64 = row.get(0);
            let body =
                json!({"id": id, "amount": amount, "currency": "EUR", "status": "succeeded"});
            tx.execute(
                "SELECT idem_complete($1, $2, $3, 201, $4)",
                &[&tenant, &key, &fence, &body],
            )
            .await?;
            tx.commit().await?;
            return Ok(reply(
                201,
                &body,
                &[("location", format!("/payments/{id}"))],
            ));
        }
        other => reply(422, &json!({"error": other}), &[]),
    };
    tx.rollback().await?;
    Ok(response)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut dsn, mut port) = (None, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dsn" => dsn = args.next(),
            "--port" => port = args.next(),
            _ => return Err(format!("unknown argument {arg}").into()),
        }
    }
    let (Some(dsn), Some(port)) = (dsn, port) else {
        return Err("usage: handwritten-axum --dsn DSN --port PORT".into());
    };
    let config = tokio_postgres::Config::from_str(&dsn)?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    // the same bound as the reference app's pool (pg-idem-http's default)
    let pool = Pool::builder(manager).max_size(16).build()?;
    let app = Router::new()
        .route("/payments", post(payments))
        .with_state(pool);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
    println!("listening on http://127.0.0.1:{port}");
    axum::serve(listener, app).await?;
    Ok(())
}
