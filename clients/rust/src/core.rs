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

/// Whether a header name (lower-case) may never be stored or replayed, whatever the configuration.
pub fn never_stored(name: &str) -> bool {
    contract()
        .defaults
        .never_stored_headers
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

/// The stored form of a response (envelope `"http": 2`): each allow-listed header by lower-cased
/// name with all its values in the order given, and the body as text when jsonb can hold it,
/// else as base64. A never-stored name is left out even when the allow-list names it.
pub fn build_envelope<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    body: &[u8],
    stored_headers: &[String],
) -> Value {
    let mut kept = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        if !stored_headers.iter().any(|h| h.eq_ignore_ascii_case(&name)) || never_stored(&name) {
            continue;
        }
        let value = Value::String(String::from_utf8_lossy(value).into_owned());
        match kept.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
            Value::Array(values) => values.push(value),
            _ => unreachable!("only arrays are inserted"),
        }
    }
    match std::str::from_utf8(body) {
        // jsonb cannot hold U+0000
        Ok(text) if !text.contains('\0') => json!({"http": 2, "headers": kept, "body": text}),
        _ => json!({"http": 2, "headers": kept, "body_base64": BASE64.encode(body)}),
    }
}

/// What a replay sends besides the status and the replay header: each header value on a line of
/// its own, in the stored order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A stored `response_body` that cannot be replayed: an envelope of an unknown `http` version,
/// or a malformed one. The answer is 500 `internal_error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableEnvelope;

/// The inverse of [`build_envelope`], given `response_body` as jsonb text; reads envelopes of
/// contract 1 (`"http": 1`, one string per name) and 2. A value that is not an envelope (no
/// `http` member: written by hand-written SQL) replays as its jsonb text, as JSON; NULL as nothing.
pub fn replay(response_body: Option<&str>) -> Result<Replay, UnreadableEnvelope> {
    let Some(text) = response_body else {
        return Ok(Replay {
            headers: Vec::new(),
            body: Vec::new(),
        });
    };
    let value: Option<Value> = serde_json::from_str(text).ok();
    match value.as_ref().and_then(|v| v.as_object()) {
        Some(envelope) if envelope.contains_key("http") => {
            decode_envelope(envelope).ok_or(UnreadableEnvelope)
        }
        _ => Ok(Replay {
            headers: vec![("content-type".into(), "application/json".into())],
            body: text.as_bytes().to_vec(),
        }),
    }
}

fn decode_envelope(obj: &Map<String, Value>) -> Option<Replay> {
    let version = obj.get("http")?.as_i64()?;
    if !(1..=2).contains(&version) {
        return None;
    }
    let mut headers = Vec::new();
    for (name, value) in obj.get("headers")?.as_object()? {
        let values = match (version, value) {
            (1, Value::String(one)) => vec![one.clone()],
            (2, Value::Array(many)) => many
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()?,
            _ => return None,
        };
        if never_stored(name) {
            // written by hand: a credential or cookie must not reach whoever holds the key
            continue;
        }
        headers.extend(values.into_iter().map(|v| (name.clone(), v)));
    }
    let body = match (obj.get("body"), obj.get("body_base64")) {
        (Some(Value::String(body)), None) => body.as_bytes().to_vec(),
        (None, Some(Value::String(b64))) => BASE64.decode(b64).ok()?,
        _ => return None,
    };
    Some(Replay { headers, body })
}

/// The request target the fingerprint binds (`$10`): the raw path and query string normalised
/// separately (RFC 3986 6.2.2, as octets), with `?query` only when the query is not empty.
pub fn normalize_target(raw: &[u8]) -> String {
    let (path, query) = match raw.iter().position(|&b| b == b'?') {
        Some(at) => (&raw[..at], &raw[at + 1..]),
        None => (raw, &[][..]),
    };
    let mut target = normalize_part(path);
    if !query.is_empty() {
        target.push('?');
        target.push_str(&normalize_part(query));
    }
    target
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_reserved(b: u8) -> bool {
    b":/?#[]@!$&'()*+,;=".contains(&b)
}

fn normalize_part(raw: &[u8]) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        let escape = (b == b'%' && i + 2 < raw.len())
            .then(|| Some((hex(raw[i + 1])?, hex(raw[i + 2])?)))
            .flatten();
        match escape {
            Some((hi, lo)) => {
                let decoded = (hi * 16 + lo) as u8;
                if is_unreserved(decoded) {
                    out.push(decoded as char);
                } else {
                    out.push_str(&format!("%{decoded:02X}"));
                }
                i += 3;
            }
            None => {
                if is_unreserved(b) || is_reserved(b) {
                    out.push(b as char);
                } else {
                    // a lone `%` included
                    out.push_str(&format!("%{b:02X}"));
                }
                i += 1;
            }
        }
    }
    out
}

/// Whether an installed pg_idem version is at least `min`: both must be three integers
/// `MAJOR.MINOR.PATCH`; anything else is too old.
pub fn version_at_least(installed: &str, min: &str) -> bool {
    fn parse(v: &str) -> Option<[u64; 3]> {
        let mut parts = v.split('.').map(|p| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        });
        let version = [parts.next()??, parts.next()??, parts.next()??];
        parts.next().is_none().then_some(version)
    }
    matches!((parse(installed), parse(min)), (Some(i), Some(m)) if i >= m)
}

/// A schema name quoted as PostgreSQL's `quote_ident` does (for the `schema` option).
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
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

/// The contract's outcome names as `'static` strings.
#[cfg(test)]
pub(crate) fn static_outcome(name: &str) -> &'static str {
    contract()
        .outcomes
        .iter()
        .find(|n| *n == name)
        .map_or("database_error", String::as_str)
}
