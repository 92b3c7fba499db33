//! Paths the reference app does not take, against a real database with pg_idem (either edition):
//!
//!     PG_IDEM_HTTP_TEST_DSN=postgresql://postgres@127.0.0.1:5432/postgres cargo test -p pg-idem-http
//!
//! test.sh starts a throwaway server with the SQL edition for it; without PG_IDEM_HTTP_TEST_DSN
//! the test fails (a test that passes without running would hide a broken path).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::Router;
use http_body_util::BodyExt;
use pg_idem_http::{Idem, IdemError, IdemLayer, Lease, Pool};
use serde_json::json;
use tower::Service;

async fn send(
    app: &mut Router,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (StatusCode, bool, String) {
    let mut req = Request::post(path);
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    let response = app
        .call(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

async fn in_tx(idem: Idem) -> Result<String, IdemError> {
    // the handler's statements run in the layer's transaction (no claim without a key)
    let row = idem
        .query_typed(
            "SELECT pg_catalog.now() = pg_catalog.statement_timestamp()",
            &[],
        )
        .await?;
    Ok(format!(
        "key={:?} same_tx={}",
        idem.key(),
        !row[0].get::<_, bool>(0)
    ))
}

async fn leased(lease: Lease, body: String) -> Result<(StatusCode, String), IdemError> {
    let resumed = lease.checkpoint_phase().map(str::to_owned);
    lease.checkpoint("charged", &json!({"n": 1})).await?;
    lease.heartbeat(None).await?;
    lease.heartbeat(Some("10 seconds")).await?;
    if body == "transient" {
        return Ok((StatusCode::SERVICE_UNAVAILABLE, "later".into()));
    }
    Ok((
        StatusCode::CREATED,
        format!("attempt={} resumed={resumed:?}", lease.attempt()),
    ))
}

async fn panics(_idem: Idem) -> &'static str {
    panic!("on purpose")
}

#[tokio::test]
async fn layer_paths_against_a_database() {
    let dsn = std::env::var("PG_IDEM_HTTP_TEST_DSN")
        .expect("PG_IDEM_HTTP_TEST_DSN: a database with pg_idem (clients/rust/test.sh starts one)");
    let pool = Pool::from_dsn(&dsn).unwrap();
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let key = |name: &str| format!("{name}-{run}");
    let mut app = Router::new()
        .route(
            "/opt",
            post(in_tx).layer(IdemLayer::new(pool.clone()).optional_key()),
        )
        .route(
            "/fields",
            post(in_tx).layer(IdemLayer::new(pool.clone()).fingerprint_fields(["amount"])),
        )
        .route(
            "/lease",
            post(leased).layer(IdemLayer::new(pool.clone()).lease("5 seconds")),
        )
        .route("/panic", post(panics).layer(IdemLayer::new(pool.clone())));

    let (status, replayed, body) = send(&mut app, "/opt", None, "").await;
    assert_eq!(
        (status, replayed, body.as_str()),
        (StatusCode::OK, false, "key=None same_tx=true")
    );
    let k = key("opt");
    let first = send(&mut app, "/opt", Some(&k), "").await;
    assert_eq!(first.0, StatusCode::OK);
    assert_eq!(
        send(&mut app, "/opt", Some(&k), "").await,
        (first.0, true, first.2)
    );

    // fields mode: the listed fields decide, not the bytes
    let k = key("fields");
    assert_eq!(
        send(&mut app, "/fields", Some(&k), r#"{"amount":1,"x":2}"#)
            .await
            .0,
        StatusCode::OK
    );
    assert!(
        send(
            &mut app,
            "/fields",
            Some(&k),
            r#"{ "x": 3, "amount": 1.0 }"#
        )
        .await
        .1
    );
    assert_eq!(
        send(&mut app, "/fields", Some(&k), r#"{"amount":2}"#)
            .await
            .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // lease mode: checkpoint and heartbeats under the fence, then a stored, replayed answer
    let k = key("lease");
    let first = send(&mut app, "/lease", Some(&k), "ok").await;
    assert_eq!(
        (first.0, first.2.as_str()),
        (StatusCode::CREATED, "attempt=1 resumed=None")
    );
    assert_eq!(
        send(&mut app, "/lease", Some(&k), "ok").await,
        (first.0, true, first.2)
    );
    // a non-final status releases the key: the retry is claimed at once, not 409
    let k = key("lease-transient");
    for _ in 0..2 {
        assert_eq!(
            send(&mut app, "/lease", Some(&k), "transient").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    // a panicking handler: rolled back, 500, and the retry runs again (panics again)
    let k = key("panic");
    for _ in 0..2 {
        let (status, _, body) = send(&mut app, "/panic", Some(&k), "").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.starts_with(r#"{"error":"internal_error""#), "{body}");
    }
}
