//! Unit tests: the contract copy, and the pure rules driven by the contract's own vectors.

use axum::response::IntoResponse;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::contract::{contract, CONTRACT_JSON};
use crate::core::{
    build_envelope, error_body, error_name_for_sqlstate, is_final, normalize_target, parse_key,
    quote_ident, replay, version_at_least,
};
use crate::{IdemError, IdemLayer, Outcomes, Pool};

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
    assert_eq!(contract().contract_version, 2);
}

#[test]
fn request_target_vectors() {
    for v in vectors("request_target") {
        let received = v["received"].as_str().unwrap();
        assert_eq!(
            normalize_target(received.as_bytes()),
            v["target"].as_str().unwrap(),
            "received {received:?}"
        );
    }
}

#[test]
fn version_vectors() {
    for v in vectors("version") {
        let installed = v["installed"].as_str().unwrap();
        assert_eq!(
            version_at_least(installed, &contract().min_pg_idem_version),
            v["ok"].as_bool().unwrap(),
            "installed {installed:?}"
        );
    }
}

#[test]
fn the_schema_option_is_quoted_as_quote_ident_does() {
    assert_eq!(quote_ident("idem_x1"), "idem_x1");
    assert_eq!(quote_ident("_p"), "_p");
    assert_eq!(quote_ident("Pg Idem"), "\"Pg Idem\"");
    assert_eq!(quote_ident("1a"), "\"1a\"");
    assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
}

#[test]
fn every_outcome_is_counted_under_its_name() {
    let outcomes = Outcomes::default();
    for name in &contract().outcomes {
        outcomes.record(crate::core::static_outcome(name), "test");
    }
    outcomes.record("stored", "test");
    let counts = outcomes.counts();
    let names: Vec<&str> = counts.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        contract()
            .outcomes
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    for (name, count) in counts {
        assert_eq!(count, if name == "stored" { 2 } else { 1 }, "{name}");
    }
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
fn envelope_vectors() {
    for v in vectors("envelope") {
        let body = BASE64.decode(v["body_base64"].as_str().unwrap()).unwrap();
        let headers: Vec<(String, String)> = serde_json::from_value(v["headers"].clone()).unwrap();
        let stored: Vec<String> = match v.get("stored_headers") {
            Some(names) => serde_json::from_value(names.clone()).unwrap(),
            None => contract().defaults.stored_headers.clone(),
        };
        let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
        let envelope = build_envelope(pairs, &body, &stored);
        assert_eq!(envelope, v["envelope"], "envelope of {v}");
        // each name's values in the order given (Value's equality ignores key order, not arrays)
        assert_eq!(envelope.to_string().len(), v["envelope"].to_string().len());
    }
}

#[test]
fn replay_vectors() {
    for v in vectors("replay") {
        let stored = replay(v["response_body"].as_str()).unwrap();
        let want: Vec<(String, String)> = serde_json::from_value(v["headers"].clone()).unwrap();
        assert_eq!(stored.headers, want, "{}", v["about"]);
        assert_eq!(
            stored.body,
            BASE64.decode(v["body_base64"].as_str().unwrap()).unwrap()
        );
    }
}

#[test]
fn an_envelope_of_an_unknown_http_version_does_not_replay() {
    assert!(replay(Some(r#"{"http": 3, "headers": {}, "body": "x"}"#)).is_err());
    assert!(replay(Some(
        r#"{"http": 2, "headers": {"etag": "one"}, "body": "x"}"#
    ))
    .is_err());
}

#[test]
fn legacy_replay_vectors() {
    for v in vectors("legacy_replay") {
        let stored = replay(v["response_body"].as_str()).unwrap();
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

#[test]
fn configuration_the_contract_forbids_is_refused() {
    let pool = || Pool::from_dsn("postgresql://nobody@127.0.0.1:1/none").unwrap();
    let no_tenant = IdemLayer::builder(pool()).check().unwrap_err();
    assert!(
        no_tenant.to_string().contains("single_tenant"),
        "{no_tenant}"
    );
    let both = IdemLayer::builder(pool())
        .tenant(|_| None)
        .single_tenant("acme")
        .check()
        .unwrap_err();
    assert!(both.to_string().contains("both"), "{both}");
    for name in &contract().defaults.never_stored_headers {
        let err = IdemLayer::builder(pool())
            .single_tenant("acme")
            .stored_headers(["content-type", &name.to_ascii_uppercase()])
            .check()
            .unwrap_err();
        assert!(err.to_string().contains(name.as_str()), "{err}");
    }
    IdemLayer::builder(pool())
        .single_tenant("acme")
        .stored_headers(contract().reference_app.stored_headers.iter().cloned())
        .check()
        .unwrap();
}

#[tokio::test]
async fn a_database_without_an_answer_refuses_to_build() {
    // nothing listens on port 1
    let err = IdemLayer::builder(Pool::from_dsn("postgresql://nobody@127.0.0.1:1/none").unwrap())
        .single_tenant("acme")
        .build()
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("cannot connect"), "{err}");
}
