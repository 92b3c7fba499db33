//! The table of decisions (decisions.json) against the decisions themselves: no server.

use pg_idem_rules::{
    decide_claim, decide_consume, decide_fenced, ClaimDecision, ConsumeDecision, FencedDecision,
    Micros, Seen, StaleBecause, State,
};
use serde::Deserialize;

const NOW: Micros = 800_000_000_000_000;
const HOUR: Micros = 3_600_000_000;

#[derive(Deserialize)]
struct Table {
    claims: Vec<Case>,
    consumes: Vec<Case>,
    fenced: Vec<FencedCase>,
}

#[derive(Deserialize)]
struct Case {
    case: String,
    row: Option<Row>,
    #[serde(default)]
    mine: bool,
    #[serde(default)]
    stale_key: bool,
    expect: String,
}

#[derive(Deserialize)]
struct Row {
    state: String,
    request: String,
    attempt: i32,
    lease: String,
    life: String,
}

#[derive(Deserialize)]
struct FencedCase {
    case: String,
    row: Option<FencedRow>,
    expect: String,
}

#[derive(Deserialize)]
struct FencedRow {
    state: String,
    fence: String,
}

fn table() -> Table {
    serde_json::from_str(include_str!("../decisions.json")).expect("decisions.json")
}

fn state(name: &str) -> State {
    match name {
        "in_progress" => State::InProgress,
        "completed" => State::Completed,
        "failed" => State::Failed,
        other => panic!("decisions.json: no state {other:?}"),
    }
}

fn seen(row: &Row) -> Seen {
    let at = |what: &str, value: &str, later: Micros| match value {
        "live" => NOW + later,
        "passed" | "expired" => NOW - 60_000_000,
        other => panic!("decisions.json: {what} {other:?}"),
    };
    Seen {
        state: state(&row.state),
        same_request: match row.request.as_str() {
            "same" => true,
            "other" => false,
            other => panic!("decisions.json: request {other:?}"),
        },
        attempt: row.attempt,
        lease_expires_at: Some(at("lease", &row.lease, HOUR)),
        expires_at: at("life", &row.life, 24 * HOUR),
    }
}

fn attempt(number: i32, takeover: bool) -> String {
    if takeover {
        format!("{number} takeover")
    } else {
        number.to_string()
    }
}

fn claim(decision: ClaimDecision) -> String {
    match decision {
        ClaimDecision::Claim(a) => format!("claim {}", attempt(a.number, a.takeover)),
        ClaimDecision::Replay => "replay".into(),
        ClaimDecision::InProgress => "in_progress".into(),
        ClaimDecision::Mismatch => "mismatch".into(),
        ClaimDecision::StaleKey => "stale_key".into(),
    }
}

fn consume(decision: ConsumeDecision) -> String {
    match decision {
        ConsumeDecision::Write(a) => format!("write {}", attempt(a.number, a.takeover)),
        ConsumeDecision::Duplicate => "duplicate".into(),
        ConsumeDecision::Held { mine: false } => "held".into(),
        ConsumeDecision::Held { mine: true } => "held mine".into(),
    }
}

fn fenced(decision: FencedDecision) -> String {
    match decision {
        FencedDecision::Holds => "holds".into(),
        FencedDecision::NotFound => "not_found".into(),
        FencedDecision::Stale(StaleBecause::Completed) => "stale completed".into(),
        FencedDecision::Stale(StaleBecause::Failed) => "stale failed".into(),
        FencedDecision::Stale(StaleBecause::NotHolder) => "stale not_holder".into(),
    }
}

#[test]
fn claims_decide_as_the_table_says() {
    let cases = table().claims;
    assert!(cases.len() >= 10, "the table lost its claims");
    for case in cases {
        let row = case.row.as_ref().map(seen);
        let mut asked = false;
        let got = claim(decide_claim(
            row.as_ref(),
            case.mine,
            || {
                asked = true;
                case.stale_key
            },
            NOW,
        ));
        assert_eq!(got, case.expect, "claim: {}", case.case);
        if asked && case.row.as_ref().is_some_and(|r| r.life == "live") {
            panic!("claim: {}: asked whether a live key is stale", case.case);
        }
    }
}

#[test]
fn consumes_decide_as_the_table_says() {
    let cases = table().consumes;
    assert!(cases.len() >= 5, "the table lost its consumes");
    for case in cases {
        assert!(
            !case.stale_key,
            "consume: {}: a consume has no stale key",
            case.case
        );
        let got = consume(decide_consume(
            case.row.as_ref().map(seen).as_ref(),
            case.mine,
            NOW,
        ));
        assert_eq!(got, case.expect, "consume: {}", case.case);
    }
}

#[test]
fn fenced_calls_decide_as_the_table_says() {
    const FENCE: i64 = 42;
    let cases = table().fenced;
    assert!(cases.len() >= 4, "the table lost its fenced calls");
    for case in cases {
        let row = case.row.as_ref().map(|r| {
            let held = match r.fence.as_str() {
                "same" => FENCE,
                "other" => FENCE + 1,
                other => panic!("decisions.json: fence {other:?}"),
            };
            (held, state(&r.state))
        });
        assert_eq!(
            fenced(decide_fenced(row, FENCE)),
            case.expect,
            "fenced: {}",
            case.case
        );
    }
}

/// The boundaries of the two times, which the table's hour and minute do not reach: a key is
/// live up to and including its expires_at, a lease up to and including its end.
#[test]
fn a_key_and_a_lease_are_live_through_their_last_microsecond() {
    let row = Seen {
        state: State::InProgress,
        same_request: true,
        attempt: 1,
        lease_expires_at: Some(NOW),
        expires_at: NOW,
    };
    assert!(!row.is_expired(NOW) && row.lease_is_live(NOW));
    assert!(row.is_expired(NOW + 1) && !row.lease_is_live(NOW + 1));
    assert!(!row.is_purgeable(NOW) && row.is_purgeable(NOW + 1));
    assert_eq!(
        decide_claim(Some(&row), false, || false, NOW),
        ClaimDecision::InProgress
    );
    assert_eq!(
        decide_claim(Some(&row), false, || false, NOW + 1),
        ClaimDecision::Claim(pg_idem_rules::Attempt::FIRST)
    );
    let message = Seen {
        lease_expires_at: None,
        ..row
    };
    assert!(!message.lease_is_live(i64::MIN));
}

#[test]
fn states_round_trip_through_their_stored_codes() {
    for s in [State::InProgress, State::Completed, State::Failed] {
        assert_eq!(State::from_code(s.code()), Some(s));
    }
    assert_eq!(State::from_code(b'x'), None);
}

#[test]
fn times_saturate_instead_of_overflowing() {
    assert_eq!(pg_idem_rules::after(i64::MAX - 1, 10), i64::MAX);
    assert_eq!(pg_idem_rules::after(NOW, HOUR), NOW + HOUR);
}
