//! Unit tests: the contract copy, and the pure rules driven by the contract's own vectors.

use axum::body::Body;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::Service;

use crate::contract::{claim_sql, contract, CONTRACT_JSON};
use crate::core::{
    build_envelope, error_body, error_name_for_sqlstate, is_final, parse_key, replay,
};
use crate::{IdemError, IdemLayer, Pool};

fn vectors(name: &str) -> &'static Vec<Value> {
    contract().vectors[name].as_array().expect("vector list")
}

#[test]
fn the_shipped_copy_is_byte_identical_to_the_source() {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../contract.json");
    // outside the repository (a packaged crate) there is no source to compare with
    if let Ok(source) = std::fs::read(&source) {
        assert!(
            source == CONTRACT_JSON.as_bytes(),
            "clients/rust/contract.json differs from clients/contract.json: run clients/sync-contract.sh"
        );
    }
}

#[test]
fn the_contract_parses() {
    assert_eq!(contract().contract_version, 1);
    assert!(!claim_sql(false).contains("{fingerprint}"));
    assert!(claim_sql(true).contains("$10::text[]"));
    assert!(!claim_sql(false).contains("$10"));
}

#[test]
fn key_header_vectors() {
    for v in vectors("key_header") {
        let header = v["header"].as_str().unwrap();
        let want = v["key"].as_str();
        assert_eq!(
            parse_key(header.as_bytes()).as_deref(),
            want,
            "header {header:?}"
        );
    }
}

#[test]
fn final_status_vectors() {
    for v in vectors("final_status") {
        let status = v["status"].as_u64().unwrap() as u16;
        assert_eq!(
            is_final(status),
            v["final"].as_bool().unwrap(),
            "status {status}"
        );
    }
}

#[test]
fn envelope_vectors_encode_and_replay() {
    for v in vectors("envelope") {
        let body = BASE64.decode(v["body_base64"].as_str().unwrap()).unwrap();
        let headers: Vec<(String, String)> = serde_json::from_value(v["headers"].clone()).unwrap();
        let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
        let envelope = build_envelope(pairs, &body, &contract().defaults.stored_headers);
        assert_eq!(envelope, v["envelope"], "envelope of {v}");

        // replay is the inverse: from the stored jsonb text back to headers and body bytes
        let stored = replay(Some(&v["envelope"].to_string()));
        assert_eq!(stored.body, body);
        let mut want: Vec<(String, String)> = v["envelope"]["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(n, v)| (n.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        let mut got = stored.headers;
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
}

#[test]
fn legacy_replay_vectors() {
    for v in vectors("legacy_replay") {
        let stored = replay(v["response_body"].as_str());
        assert_eq!(stored.body, v["body"].as_str().unwrap().as_bytes());
        let content_type = stored
            .headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .map(|(_, v)| v.as_str());
        assert_eq!(content_type, v["content_type"].as_str());
    }
}

#[test]
fn an_envelope_like_value_that_is_not_one_replays_as_json() {
    for text in [
        r#"{"http": 2, "headers": {}, "body": "x"}"#,
        r#"{"http": 1, "body": "x"}"#,
        "[1, 2]",
    ] {
        let stored = replay(Some(text));
        assert_eq!(stored.body, text.as_bytes());
    }
}

#[test]
fn error_bodies_are_compact_in_order_and_escaped() {
    assert_eq!(
        error_body(
            "mismatch",
            "This Idempotency-Key was used with a different request."
        ),
        r#"{"error":"mismatch","message":"This Idempotency-Key was used with a different request."}"#
    );
    assert_eq!(
        error_body("x", "a \"b\" \\ c\nd"),
        r#"{"error":"x","message":"a \"b\" \\ c\nd"}"#
    );
    for (name, spec) in &contract().errors {
        let message = spec.message.clone().unwrap_or_default();
        let want = serde_json::to_string(&json!({"error": name, "message": message})).unwrap();
        // serde_json's map is ordered by key, and "error" < "message"
        assert_eq!(error_body(name, &message), want);
    }
}

#[test]
fn sqlstates_map_by_first_matching_prefix() {
    let cases = [
        (Some("55000"), "lease_lost"),
        (Some("42501"), "forbidden"),
        (Some("54000"), "invalid_request"),
        (Some("22004"), "invalid_request"),
        (Some("22P02"), "invalid_request"),
        (Some("57014"), "unavailable"),
        (Some("25P03"), "unavailable"),
        (Some("57P01"), "unavailable"),
        (Some("08006"), "unavailable"),
        (Some("23505"), "internal_error"),
        (Some("40001"), "internal_error"),
        (Some("P0002"), "internal_error"),
        (None, "unavailable"),
    ];
    for (code, name) in cases {
        assert_eq!(error_name_for_sqlstate(code), name, "{code:?}");
    }
    for (prefix, name) in &contract().sqlstates {
        let code = format!("{prefix:0<5}");
        assert_eq!(error_name_for_sqlstate(Some(&code)), name, "{code}");
    }
}

async fn body_of(response: axum::response::Response) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes().to_vec(),
    )
}

#[tokio::test]
async fn errors_render_per_the_contract() {
    for (name, spec) in &contract().errors {
        let (status, headers, body) = body_of(IdemError::new(name).into_response()).await;
        assert_eq!(status.as_u16(), spec.status);
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            body,
            error_body(name, spec.message.as_deref().unwrap_or("")).as_bytes()
        );
        let retry_after = headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let default = contract().defaults.retry_after_seconds.to_string();
        assert_eq!(retry_after, spec.retry_after.then_some(default), "{name}");
    }
}

/// The layer's answers that come before any database work, and the one when the database is down.
#[tokio::test]
async fn the_layer_refuses_before_claiming() {
    // nothing listens on port 1: connecting fails without a SQLSTATE
    let pool = Pool::from_dsn("postgresql://nobody@127.0.0.1:1/none").unwrap();
    let layer = IdemLayer::new(pool).retry_after_seconds(7).tenant(|parts| {
        match parts.headers.get("x-tenant") {
            Some(t) => Ok(t.to_str().unwrap().to_owned()),
            None => Err((StatusCode::UNAUTHORIZED, "who?")),
        }
    });
    let mut app = Router::new().route("/p", post(|| async { "ran" }).layer(layer));
    let mut call = |key: Option<&str>, tenant: bool| {
        let mut req = Request::post("/p");
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        if tenant {
            req = req.header("X-Tenant", "t");
        }
        app.call(req.body(Body::from("{}")).unwrap())
    };
    let (status, _, body) = body_of(call(Some("k"), false).await.unwrap()).await;
    assert_eq!(
        (status, body.as_slice()),
        (StatusCode::UNAUTHORIZED, b"who?".as_slice())
    );
    let (status, _, body) = body_of(call(None, true).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        error_body(
            "key_missing",
            contract().errors["key_missing"].message.as_deref().unwrap()
        )
        .as_bytes()
    );
    let (status, _, body) = body_of(call(Some("with space"), true).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.starts_with(br#"{"error":"key_invalid""#));
    let (status, headers, body) = body_of(call(Some("\"k\""), true).await.unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.starts_with(br#"{"error":"unavailable""#));
    assert_eq!(headers["retry-after"], "7");
}
