use axum::{http::StatusCode, routing::post, Router};
use pg_idem_http::{Idem, IdemError, IdemLayer, Lease, Pool};
use tokio_postgres::types::Type;

// Transaction mode: `idem` derefs to the tokio_postgres::Client inside the claimed transaction.
async fn create_order(idem: Idem, body: String) -> Result<(StatusCode, String), IdemError> {
    let key = idem.key().unwrap_or_default().to_owned();
    let rows = idem
        .query_typed(
            "INSERT INTO orders (idem_key, body) VALUES ($1, $2) RETURNING id",
            &[(&key, Type::TEXT), (&body, Type::TEXT)],
        )
        .await?; // a database error maps to the contract's error response, and rolls back
    let id: i64 = rows[0].get(0);
    Ok((StatusCode::CREATED, format!("{{\"id\":{id}}}")))
}

// Lease mode: the handler runs outside any transaction (it calls another service), then writes
// in the completion transaction, which checks the fence first.
async fn send_payout(lease: Lease) -> Result<(StatusCode, String), IdemError> {
    // the same UUID on every attempt: call the bank with it as its idempotency key
    let bank_key = lease.downstream_key("bank").await?;
    let tx = lease.begin().await?; // 409 lease_lost if another attempt took over
    tx.query_typed(
        "INSERT INTO payouts (ref) VALUES ($1)",
        &[(&bank_key, Type::TEXT)],
    )
    .await?;
    Ok((StatusCode::CREATED, bank_key))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = Pool::from_dsn(&std::env::var("DATABASE_URL")?)?; // a PostgreSQL URI
    let idem = IdemLayer::builder(pool).tenant(|parts| {
        // your auth decides the tenant; None (or "") is 400 tenant_missing, before any claim
        let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
        Some(tenant.to_owned())
    });
    // build() checks pg_idem in the database (found, recent enough) and refuses to start if not
    let orders = idem.clone().build().await?;
    let payouts = idem.lease("30 seconds").build().await?;
    let app = Router::new()
        .route("/orders", post(create_order).layer(orders))
        .route("/payouts", post(send_payout).layer(payouts));
    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".to_owned());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
