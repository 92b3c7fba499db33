//! The layer through real HTTP (an axum server on loopback, hyper's client) against a real
//! database with pg_idem (either edition):
//!
//!     PG_IDEM_HTTP_TEST_DSN=postgresql://postgres@127.0.0.1:5432/postgres cargo test -p pg-idem-http
//!
//! test.sh starts a throwaway server with the SQL edition for it; without PG_IDEM_HTTP_TEST_DSN
//! the tests fail (a test that passes without running would hide a broken path).

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pg_idem_http::tokio_postgres::types::Type;
use pg_idem_http::{Idem, IdemError, IdemLayer, Lease, Pool};
use serde_json::json;

fn dsn() -> String {
    std::env::var("PG_IDEM_HTTP_TEST_DSN")
        .expect("PG_IDEM_HTTP_TEST_DSN: a database with pg_idem (clients/rust/test.sh starts one)")
}

fn unique(name: &str) -> String {
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{run}")
}

/// Serves `app` on a free loopback port; returns its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn replayed(&self) -> bool {
        self.headers.contains_key("idempotent-replayed")
    }
    fn error(&self) -> &str {
        let end = self.body.find(r#"","message""#).unwrap_or(0);
        self.body.get(10..end).unwrap_or("")
    }
}

async fn post_to(base: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = hyper::Request::post(format!("{base}{target}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn in_tx(idem: Idem) -> Result<String, IdemError> {
    // the handler's statements run in the layer's transaction
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

async fn with_headers(body: String) -> Response {
    let mut response = (StatusCode::CREATED, body).into_response();
    let h = response.headers_mut();
    h.append("set-cookie", "s=1; HttpOnly".parse().unwrap());
    h.append("link", "</a>".parse().unwrap());
    h.append("link", "</b>".parse().unwrap());
    h.append("x-request-id", "r1".parse().unwrap());
    response
}

async fn ends_tx(idem: Idem, body: String) -> Result<&'static str, IdemError> {
    match body.as_str() {
        "api" => idem.commit().await?,
        "api-rollback" => idem.rollback().await?,
        _ => idem.batch_execute(&body).await?,
    }
    Ok("done")
}

async fn leased(lease: Lease, body: String) -> Result<(StatusCode, String), IdemError> {
    let resumed = lease.checkpoint_phase().map(str::to_owned);
    lease.checkpoint("charged", &json!({"n": 1})).await?;
    // None extends by the route's lease (5 seconds), not the database's default (1 minute)
    let seconds_left = |until: SystemTime| {
        until
            .duration_since(SystemTime::now())
            .map_or(0, |d| d.as_secs())
    };
    let by_route = seconds_left(lease.heartbeat(None).await?);
    let by_argument = seconds_left(lease.heartbeat(Some("10 seconds")).await?);
    if by_route > 5 || !(6..=10).contains(&by_argument) {
        let leases = format!("heartbeats left {by_route} s and {by_argument} s");
        return Ok((StatusCode::INTERNAL_SERVER_ERROR, leases));
    }
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

fn tenant(parts: &axum::http::request::Parts) -> Option<String> {
    Some(parts.headers.get("x-tenant")?.to_str().ok()?.to_owned())
}

#[tokio::test]
async fn the_layer_through_http() {
    let pool = Pool::from_dsn(&dsn()).unwrap();
    let layer = || IdemLayer::builder(pool.clone()).tenant(tenant);
    let app = Router::new()
        .route(
            "/opt",
            post(in_tx).layer(layer().optional_key().build().await.unwrap()),
        )
        .route(
            "/fields",
            post(in_tx).layer(
                layer()
                    .fingerprint_fields(["amount"])
                    .build()
                    .await
                    .unwrap(),
            ),
        )
        .route(
            "/orders/{id}",
            post(in_tx).layer(layer().build().await.unwrap()),
        )
        .route(
            "/headers",
            post(with_headers).layer(
                layer()
                    .stored_headers(["content-type", "link"])
                    .build()
                    .await
                    .unwrap(),
            ),
        )
        .route("/ends", post(ends_tx).layer(layer().build().await.unwrap()))
        .route(
            "/lease",
            post(leased).layer(layer().lease("5 seconds").build().await.unwrap()),
        )
        .route("/panic", post(panics).layer(layer().build().await.unwrap()));
    let base = serve(app).await;
    let t = ("x-tenant", "t1");
    let before = pool.outcomes().counts();

    // tenant required: a hook answering None is 400 tenant_missing before any claim
    let k = unique("tenant");
    let a = post_to(&base, "/orders/1", &[("idempotency-key", &k)], "").await;
    assert_eq!(
        (a.status, a.error()),
        (StatusCode::BAD_REQUEST, "tenant_missing"),
        "{}",
        a.body
    );
    let a = post_to(
        &base,
        "/orders/1",
        &[("idempotency-key", &k), ("x-tenant", "")],
        "",
    )
    .await;
    assert_eq!(a.error(), "tenant_missing");
    let a = post_to(&base, "/orders/1", &[t], "").await;
    assert_eq!(a.error(), "key_missing");
    let a = post_to(
        &base,
        "/orders/1",
        &[t, ("idempotency-key", "with space")],
        "",
    )
    .await;
    assert_eq!(a.error(), "key_invalid");

    // optional key: a plain transaction; with a key, stored and replayed
    let a = post_to(&base, "/opt", &[t], "").await;
    assert_eq!(
        (a.status, a.replayed(), a.body.as_str()),
        (StatusCode::OK, false, "key=None same_tx=true")
    );
    let k = unique("opt");
    let first = post_to(&base, "/opt", &[t, ("idempotency-key", &k)], "").await;
    let again = post_to(&base, "/opt", &[t, ("idempotency-key", &k)], "").await;
    assert_eq!(
        (again.status, again.replayed(), &again.body),
        (first.status, true, &first.body)
    );

    // the target is part of the request: another resource or query string is a mismatch, an
    // escape of an unreserved character is the same target
    let k = unique("target");
    let h = [t, ("idempotency-key", k.as_str())];
    assert_eq!(
        post_to(&base, "/orders/7?x=1", &h, "{}").await.status,
        StatusCode::OK
    );
    assert!(post_to(&base, "/orders/7?x=%31", &h, "{}").await.replayed());
    assert_eq!(
        post_to(&base, "/orders/8?x=1", &h, "{}").await.error(),
        "mismatch"
    );
    assert_eq!(
        post_to(&base, "/orders/7?x=2", &h, "{}").await.error(),
        "mismatch"
    );
    assert_eq!(
        post_to(&base, "/orders/7", &h, "{}").await.error(),
        "mismatch"
    );
    // another tenant is another namespace
    let other = post_to(
        &base,
        "/orders/8?x=1",
        &[("x-tenant", "t2"), ("idempotency-key", &k)],
        "{}",
    )
    .await;
    assert_eq!((other.status, other.replayed()), (StatusCode::OK, false));

    // fields mode: the listed fields decide, not the bytes
    let k = unique("fields");
    let h = [t, ("idempotency-key", k.as_str())];
    assert_eq!(
        post_to(&base, "/fields", &h, r#"{"amount":1,"x":2}"#)
            .await
            .status,
        StatusCode::OK
    );
    assert!(
        post_to(&base, "/fields", &h, r#"{ "x": 3, "amount": 1.0 }"#)
            .await
            .replayed()
    );
    assert_eq!(
        post_to(&base, "/fields", &h, r#"{"amount":2}"#)
            .await
            .error(),
        "mismatch"
    );

    // headers: every Link value in order, never Set-Cookie, nothing outside the allow-list
    let k = unique("headers");
    let h = [t, ("idempotency-key", k.as_str())];
    let first = post_to(&base, "/headers", &h, "hi").await;
    assert!(first.headers.contains_key("set-cookie"));
    let replay = post_to(&base, "/headers", &h, "hi").await;
    assert!(replay.replayed());
    let links: Vec<_> = replay.headers.get_all("link").iter().collect();
    assert_eq!(links, ["</a>", "</b>"]);
    assert!(!replay.headers.contains_key("set-cookie"));
    assert!(!replay.headers.contains_key("x-request-id"));
    assert_eq!(
        (replay.status, replay.body.as_str()),
        (StatusCode::CREATED, "hi")
    );

    // the handle cannot end the transaction: its API refuses, raw SQL is detected
    for how in ["api", "api-rollback"] {
        let k = unique(how);
        let h = [t, ("idempotency-key", k.as_str())];
        let a = post_to(&base, "/ends", &h, how).await;
        assert_eq!(
            (a.status, a.error()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
        );
        // rolled back: the retry runs again (and is refused again)
        assert!(!post_to(&base, "/ends", &h, how).await.replayed());
    }
    let ended = pool.outcomes().get("transaction_ended");
    for sql in ["COMMIT", "ROLLBACK"] {
        let k = unique(sql);
        let h = [t, ("idempotency-key", k.as_str())];
        let a = post_to(&base, "/ends", &h, sql).await;
        assert_eq!(
            (a.status, a.error()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            "{sql}"
        );
    }
    assert_eq!(pool.outcomes().get("transaction_ended"), ended + 2);
    // COMMIT made the claim durable without a response: the key stays in progress
    let k = unique("COMMIT");
    let h = [t, ("idempotency-key", k.as_str())];
    post_to(&base, "/ends", &h, "COMMIT").await;
    assert_eq!(
        post_to(&base, "/ends", &h, "COMMIT").await.error(),
        "in_progress"
    );

    // lease mode: checkpoint and heartbeats under the fence, then a stored, replayed answer
    let k = unique("lease");
    let h = [t, ("idempotency-key", k.as_str())];
    let first = post_to(&base, "/lease", &h, "ok").await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::CREATED, "attempt=1 resumed=None")
    );
    assert!(post_to(&base, "/lease", &h, "ok").await.replayed());
    // a non-final status releases the key: the retry is claimed at once, not 409
    let k = unique("lease-transient");
    for _ in 0..2 {
        let a = post_to(&base, "/lease", &[t, ("idempotency-key", &k)], "transient").await;
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    }

    // a panicking handler: rolled back, 500, and the retry runs again (panics again)
    let k = unique("panic");
    for _ in 0..2 {
        let a = post_to(&base, "/panic", &[t, ("idempotency-key", &k)], "").await;
        assert_eq!(
            (a.status, a.error()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
        );
    }

    // every outcome was counted
    let after = pool.outcomes().counts();
    for ((name, b), (_, a)) in before.iter().zip(after.iter()) {
        let expected_some = !matches!(*name, "lease_lost" | "database_error");
        assert_eq!(a > b, expected_some, "{name}: {b} -> {a}");
    }
}

#[tokio::test]
async fn pg_idem_is_located_and_checked_once_per_pool() {
    let pool = Pool::from_dsn(&dsn()).unwrap();
    let schema = pool.statements().await.unwrap().schema.clone();
    // the schema option, given right: no locate needed
    let given = Pool::from_dsn(&dsn())
        .unwrap()
        .schema(schema.trim_matches('"'));
    assert_eq!(given.statements().await.unwrap().schema, schema);
    // given wrong: the version check cannot find pg_idem there, and the layer refuses to build
    let wrong = Pool::from_dsn(&dsn()).unwrap().schema("no_such_schema");
    let err = IdemLayer::builder(wrong)
        .single_tenant("acme")
        .build()
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("no_such_schema"), "{err}");
    // a schema without idem_version() (pg_idem 0.5.0 as released has none): older than the minimum
    let old = Pool::from_dsn(&dsn()).unwrap().schema("pg_catalog");
    let err = old.statements().await.unwrap_err().to_string();
    let min = &pg_idem_http::contract::contract().min_pg_idem_version;
    assert!(
        err.contains("no idem_version()") && err.contains(min.as_str()),
        "{err}"
    );
    // the failed check's connection was not returned inside its transaction: the pool still works
    old.deadpool()
        .get()
        .await
        .unwrap()
        .batch_execute("SELECT 1")
        .await
        .unwrap();
}

/// The bring-your-own-transaction recipe (README): the handler owns its deadpool-postgres
/// transaction and calls the layer's steps itself.
#[derive(Clone)]
struct Recipe {
    pool: Pool,
    idem: IdemLayer,
}

async fn recipe_handler(State(app): State<Recipe>, req: Request) -> Result<Response, Response> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .map_err(|_| StatusCode::PAYLOAD_TOO_LARGE.into_response())?;
    let scope = app.idem.scope(&parts, body)?;
    let mut client = app
        .pool
        .deadpool()
        .get()
        .await
        .map_err(|e| IdemError::from(e).into_response())?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| IdemError::from(e).into_response())?;
    let claim = app.idem.claim(&*tx, &scope).await?;
    if !claim.is_claimed() {
        return Ok(app.idem.answer(&claim)); // dropping tx rolls back
    }
    let n: i64 = tx
        .query_typed(
            "SELECT $1::int8 * 2",
            &[(&(scope.body.len() as i64), Type::INT8)],
        )
        .await
        .map_err(|e| IdemError::from(e).into_response())?[0]
        .get(0);
    let response = (StatusCode::CREATED, format!("doubled {n}")).into_response();
    let (response, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    app.idem
        .complete(&*tx, &scope, &claim, &response, &body)
        .await?;
    tx.commit()
        .await
        .map_err(|e| IdemError::from(e).into_response())?;
    Ok(Response::from_parts(response, Body::from(body)))
}

#[tokio::test]
async fn the_bring_your_own_transaction_recipe() {
    let pool = Pool::from_dsn(&dsn()).unwrap();
    let idem = IdemLayer::builder(pool.clone())
        .single_tenant("recipe")
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/r/{id}", post(recipe_handler))
        .with_state(Recipe {
            pool: pool.clone(),
            idem,
        });
    let base = serve(app).await;
    let k = unique("recipe");
    let h = [("idempotency-key", k.as_str())];
    let first = post_to(&base, "/r/1", &h, "abc").await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::CREATED, "doubled 6")
    );
    let again = post_to(&base, "/r/1", &h, "abc").await;
    assert_eq!(
        (again.status, again.replayed(), again.body.as_str()),
        (StatusCode::CREATED, true, "doubled 6")
    );
    assert_eq!(post_to(&base, "/r/2", &h, "abc").await.error(), "mismatch");
    assert_eq!(pool.outcomes().get("stored"), 1);
}

/// In a database of its own: without pg_idem the layer refuses to build; with an `idem_*`
/// function of another role in pg_idem's schema it refuses and names the function.
#[tokio::test]
async fn a_missing_or_shadowed_pg_idem_refuses_to_build() {
    let admin = Pool::from_dsn(&dsn()).unwrap();
    let admin = admin.deadpool().get().await.unwrap();
    let name = unique("idem_http_empty").replace('-', "_");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut config: pg_idem_http::tokio_postgres::Config = dsn().parse().unwrap();
    config.dbname(&name);
    let build = || async {
        let pool = Pool::new(config.clone(), pg_idem_http::tokio_postgres::NoTls, 2).unwrap();
        let built = IdemLayer::builder(pool).single_tenant("acme").build().await;
        built.err().expect("refused").to_string()
    };
    let missing = build().await;
    assert!(missing.contains("not installed"), "{missing}");

    // the SQL edition's layout (schema idem, functions in public) with a look-alike of another role
    let (client, connection) = config
        .connect(pg_idem_http::tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA idem; CREATE ROLE {name}_r; GRANT CREATE ON SCHEMA public TO {name}_r;
             SET ROLE {name}_r; CREATE FUNCTION public.idem_claim(int) RETURNS int LANGUAGE sql AS 'SELECT 1'; RESET ROLE"
        ))
        .await
        .unwrap();
    let shadowed = build().await;
    assert!(shadowed.contains("idem_claim(integer)"), "{shadowed}");
    client
        .batch_execute(&format!("DROP OWNED BY {name}_r"))
        .await
        .unwrap();
    drop(client);
    for cleanup in [
        format!("DROP DATABASE {name} WITH (FORCE)"),
        format!("DROP ROLE {name}_r"),
    ] {
        admin.batch_execute(&cleanup).await.unwrap();
    }
}

async fn maybe_slow(idem: Idem, headers: axum::http::HeaderMap) -> Result<&'static str, IdemError> {
    idem.query_typed("SELECT 1", &[]).await?;
    if headers.contains_key("x-sleep") {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    }
    Ok("done")
}

/// A request whose client goes away mid-handler: its connection, still inside the claim's
/// transaction, is closed (the server rolls the claim back), never handed to the next request.
#[tokio::test]
async fn a_cancelled_request_does_not_hand_its_transaction_on() {
    let config: pg_idem_http::tokio_postgres::Config = dsn().parse().unwrap();
    // one connection: the next request gets whatever the cancelled one left
    let pool = Pool::new(config, pg_idem_http::tokio_postgres::NoTls, 1).unwrap();
    let layer = IdemLayer::builder(pool.clone())
        .single_tenant("cancel")
        .build()
        .await
        .unwrap();
    let base = serve(Router::new().route("/slow", post(maybe_slow).layer(layer))).await;
    let k = unique("cancelled");
    let slow = [("idempotency-key", k.as_str()), ("x-sleep", "1")];
    let cancelled = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        post_to(&base, "/slow", &slow, ""),
    )
    .await;
    assert!(cancelled.is_err(), "the slow request answered");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let other = unique("after");
    let a = post_to(&base, "/slow", &[("idempotency-key", &other)], "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    // the cancelled claim was rolled back: its retry is claimed afresh, not 409 in_progress
    let a = post_to(&base, "/slow", &[("idempotency-key", &k)], "").await;
    assert_eq!(
        (a.status, a.replayed()),
        (StatusCode::OK, false),
        "{}",
        a.body
    );
}
