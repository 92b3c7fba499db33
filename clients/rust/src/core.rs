//! The contract's rules as pure functions: no I/O, so the unit tests drive them with the
//! contract's vectors and every package can be checked against the same table.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::contract::contract;

/// Parses an `Idempotency-Key` header value (its raw bytes: a non-ASCII value must be refused,
/// not decoded). `None` means malformed: 400 `key_invalid`.
pub fn parse_key(raw: &[u8]) -> Option<String> {
    let trimmed = trim_ows(raw);
    let key = match trimmed {
        // a Structured Field string: printable ASCII, `\"` and `\\` its only escapes
        [b'"', inner @ .., b'"'] => {
            let mut key = Vec::with_capacity(inner.len());
            let mut bytes = inner.iter();
            while let Some(&b) = bytes.next() {
                match b {
                    b'\\' => match bytes.next() {
                        Some(&e @ (b'"' | b'\\')) => key.push(e),
                        _ => return None,
                    },
                    b'"' => return None,
                    0x20..=0x7e => key.push(b),
                    _ => return None,
                }
            }
            key
        }
        [b'"', ..] => return None,
        // the bare form: visible ASCII without `"`
        bare if bare
            .iter()
            .all(|&b| (0x21..=0x7e).contains(&b) && b != b'"') =>
        {
            bare.to_vec()
        }
        _ => return None,
    };
    if key.is_empty() || key.len() > contract().defaults.max_key_length {
        return None;
    }
    // only ASCII got through
    String::from_utf8(key).ok()
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether a handler's status is its final answer (stored and replayed) rather than one a retry
/// may change (rolled back).
pub fn is_final(status: u16) -> bool {
    let rule = &contract().defaults.final_status;
    (rule.from..=rule.to).contains(&status) && !rule.except.contains(&status)
}

/// The stored form of a response: the allow-listed headers (first value of each, by lower-cased
/// name) and the body as text when jsonb can hold it, else as base64.
pub fn build_envelope<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    body: &[u8],
    stored_headers: &[String],
) -> Value {
    let mut kept = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        if stored_headers.iter().any(|h| h.eq_ignore_ascii_case(&name)) && !kept.contains_key(&name)
        {
            kept.insert(
                name,
                Value::String(String::from_utf8_lossy(value).into_owned()),
            );
        }
    }
    match std::str::from_utf8(body) {
        // jsonb cannot hold U+0000
        Ok(text) if !text.contains('\0') => json!({"http": 1, "headers": kept, "body": text}),
        _ => json!({"http": 1, "headers": kept, "body_base64": BASE64.encode(body)}),
    }
}

/// What a replay sends besides the status and the replay header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The inverse of [`build_envelope`], given `response_body` as jsonb text. A value that is not an
/// envelope (written by hand-written SQL) replays as its jsonb text, as JSON; NULL as nothing.
pub fn replay(response_body: Option<&str>) -> Replay {
    let Some(text) = response_body else {
        return Replay {
            headers: Vec::new(),
            body: Vec::new(),
        };
    };
    if let Some(replay) = decode_envelope(text) {
        return replay;
    }
    Replay {
        headers: vec![("content-type".into(), "application/json".into())],
        body: text.as_bytes().to_vec(),
    }
}

fn decode_envelope(text: &str) -> Option<Replay> {
    let value: Value = serde_json::from_str(text).ok()?;
    let obj = value.as_object()?;
    if obj.get("http")?.as_i64()? != 1 {
        return None;
    }
    let mut headers = Vec::new();
    for (name, value) in obj.get("headers")?.as_object()? {
        headers.push((name.clone(), value.as_str()?.to_owned()));
    }
    let body = match (obj.get("body"), obj.get("body_base64")) {
        (Some(Value::String(body)), None) => body.as_bytes().to_vec(),
        (None, Some(Value::String(b64))) => BASE64.decode(b64).ok()?,
        _ => return None,
    };
    Some(Replay { headers, body })
}

/// An error body, exactly `{"error":"<name>","message":"<message>"}`.
pub fn error_body(name: &str, message: &str) -> String {
    // serde_json escapes as JSON requires (quotes, backslashes, control characters) and leaves
    // other characters as UTF-8
    format!(
        "{{\"error\":{},\"message\":{}}}",
        Value::String(name.into()),
        Value::String(message.into())
    )
}

/// The contract's error name for a database error: by SQLSTATE (first prefix that matches, else
/// `internal_error`); no SQLSTATE at all (connection lost, I/O) is `unavailable`.
pub fn error_name_for_sqlstate(sqlstate: Option<&str>) -> &'static str {
    let Some(code) = sqlstate else {
        return "unavailable";
    };
    contract()
        .sqlstates
        .iter()
        .find(|(prefix, _)| code.starts_with(prefix.as_str()))
        .map(|(_, name)| static_name(name))
        .unwrap_or("internal_error")
}

/// The contract's error names as `'static` strings (the contract itself is `'static`).
pub(crate) fn static_name(name: &str) -> &'static str {
    contract()
        .errors
        .get_key_value(name)
        .map(|(k, _)| k.as_str())
        .unwrap_or("internal_error")
}
