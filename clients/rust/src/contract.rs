//! The HTTP contract (`clients/contract.json`), embedded at build time and parsed once.
//!
//! Every fact the package uses (header names, defaults, error messages, the SQLSTATE table, the SQL
//! text) comes from here, so the Rust, Python and Node packages cannot drift apart.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The byte-identical copy of `clients/contract.json` this crate ships (`clients/sync-contract.sh`).
pub const CONTRACT_JSON: &str = include_str!("../contract.json");

#[derive(Debug, Deserialize)]
pub struct Contract {
    pub contract_version: u32,
    pub defaults: Defaults,
    pub errors: BTreeMap<String, ErrorSpec>,
    /// `[prefix, error name]`, first match wins.
    pub sqlstates: Vec<(String, String)>,
    pub sql: Sql,
    pub vectors: serde_json::Value,
    pub reference_app: ReferenceApp,
    /// The lowest pg_idem this contract's SQL runs on (`MAJOR.MINOR.PATCH`).
    pub min_pg_idem_version: String,
    /// Every outcome a request can end in, counted and reported.
    pub outcomes: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Defaults {
    pub key_header: String,
    pub replay_header: String,
    pub replay_header_value: String,
    pub stored_headers: Vec<String>,
    /// Names no configuration can store or replay.
    pub never_stored_headers: Vec<String>,
    pub max_key_length: usize,
    pub max_body_bytes: usize,
    pub retry_after_seconds: u32,
    pub statement_timeout_ms: u64,
    pub idle_in_transaction_timeout_ms: u64,
    pub final_status: FinalStatus,
}

#[derive(Debug, Deserialize)]
pub struct FinalStatus {
    pub from: u16,
    pub to: u16,
    pub except: Vec<u16>,
}

#[derive(Debug, Deserialize)]
pub struct ErrorSpec {
    pub status: u16,
    /// `None` for `invalid_request`, which carries the database's own message.
    pub message: Option<String>,
    #[serde(default)]
    pub retry_after: bool,
}

#[derive(Debug, Deserialize)]
pub struct Sql {
    pub locate: String,
    pub version: String,
    pub claim: String,
    pub fingerprint_body: String,
    pub fingerprint_fields: String,
    pub complete: String,
    pub fail_final: String,
    pub release: String,
    pub assert_fence: String,
    pub heartbeat: String,
    pub checkpoint: String,
    pub downstream_key: String,
}

#[derive(Debug, Deserialize)]
pub struct ReferenceApp {
    /// Run in one transaction before a reference app listens: the apps' lock, then the tables.
    pub tables: Vec<String>,
    pub statement_timeout_ms: u64,
    pub idle_in_transaction_timeout_ms: u64,
    pub payout_lease: String,
    pub payment_json: String,
    pub payment_text: String,
    pub declined_json: String,
    pub payout_json: String,
    pub order_route: String,
    pub cookie: String,
    pub links: Vec<String>,
    pub stored_headers: Vec<String>,
}

/// The parsed contract; a malformed embedded copy is a build defect, caught by the unit tests.
pub fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        serde_json::from_str(CONTRACT_JSON).expect("embedded contract.json is malformed")
    })
}
