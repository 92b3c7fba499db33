//! The SQL edition's hashing functions (sql/edition/hashing.sql) against the native ones
//! (src/hashing/), on a server with native pg_idem: every fingerprint, key and UUID the SQL
//! edition computes must be the native one, bit for bit. Where native exposes no SQL function
//! (the lock identity, the stored form of a request hash, the UUIDv7 time of the stale-key
//! rule), its effects are compared: the advisory lock a claim holds, the row it writes, the
//! claims it refuses as stale. JSON values are also checked against an independent writer of
//! the canonical form (below), on a fixed corpus and on random values from a seeded generator,
//! in a database whose default collation is not byte order where the server has ICU.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use pg_idem_tests::*;

mod json_values;
mod keys_and_locks;
mod uuid_v7;

const HASHING_SQL: &str = include_str!("../../../sql/edition/hashing.sql");

/// Creates the SQL edition's hashing functions beside native pg_idem (which made schema idem).
fn load(db: &mut Client) {
    db.batch_execute(HASHING_SQL)
        .expect("sql/edition/hashing.sql runs");
}

/// Databases to compare in, each with native pg_idem and the SQL functions: `postgres`
/// (C.UTF-8, which sorts like bytes) and, where the server has ICU, one whose default collation
/// sorts "a" before "B": sorting object keys by anything but their bytes fails there.
fn databases(server: &Server) -> Vec<(&'static str, Client)> {
    let mut db = server.client();
    load(&mut db);
    let mut all = vec![("postgres", db)];
    let mut admin = server.client();
    match admin.batch_execute(
        "CREATE DATABASE hashing_icu TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' \
         LOCALE_PROVIDER icu ICU_LOCALE 'en'",
    ) {
        Ok(()) => {
            let mut icu = server.client_db("hashing_icu");
            icu.batch_execute("CREATE EXTENSION pg_idem")
                .expect("create extension in hashing_icu");
            load(&mut icu);
            all.push(("hashing_icu", icu));
        }
        Err(e) => eprintln!(
            "no ICU database ({}): comparing in postgres (C.UTF-8) only",
            e.as_db_error()
                .map_or(e.to_string(), |d| d.message().to_string())
        ),
    }
    all
}

// ---------------------------------------------------------------------------------------------
// An independent writer of the canonical form (the rules of src/hashing/canonical_json.rs)
// ---------------------------------------------------------------------------------------------

/// splitmix64: a seeded generator, so that a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// A JSON value, with what it must become in canonical form.
enum Json {
    Null,
    Bool(bool),
    /// a number: its canonical text and one of its JSON spellings
    Number {
        canonical: String,
        spelling: String,
    },
    Str(String),
    Array(Vec<Json>),
    /// members in the order written, repeated keys included (jsonb keeps the last)
    Object(Vec<(String, Json)>),
}

/// The canonical form of a string: `"` `\` and controls escaped, the rest raw.
fn canonical_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `\uXXXX` in random case.
fn unicode_escape(rng: &mut Rng, unit: u32) -> String {
    let hex = format!("{unit:04x}");
    if rng.chance(50) {
        format!("\\u{}", hex.to_uppercase())
    } else {
        format!("\\u{hex}")
    }
}

/// A JSON spelling of a string: escapes chosen at random wherever JSON allows one.
fn spell_string(rng: &mut Rng, s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        let code = c as u32;
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' if rng.chance(70) => out.push_str(match c {
                '\u{8}' => "\\b",
                '\u{c}' => "\\f",
                '\n' => "\\n",
                '\r' => "\\r",
                _ => "\\t",
            }),
            '/' if rng.chance(50) => out.push_str("\\/"),
            _ if code < 0x20 || rng.chance(20) => {
                if code > 0xffff {
                    let v = code - 0x10000;
                    let (high, low) = (0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                    out.push_str(&unicode_escape(rng, high));
                    out.push_str(&unicode_escape(rng, low));
                } else {
                    out.push_str(&unicode_escape(rng, code));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Json {
    fn canonical(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::Number { canonical, .. } => canonical.clone(),
            Json::Str(s) => canonical_string(s),
            Json::Array(items) => {
                let items: Vec<String> = items.iter().map(Json::canonical).collect();
                format!("[{}]", items.join(","))
            }
            Json::Object(members) => {
                // the last of repeated keys, in the order of the keys' UTF-8 bytes
                let last: BTreeMap<&str, &Json> =
                    members.iter().map(|(k, v)| (k.as_str(), v)).collect();
                let members: Vec<String> = last
                    .iter()
                    .map(|(k, v)| format!("{}:{}", canonical_string(k), v.canonical()))
                    .collect();
                format!("{{{}}}", members.join(","))
            }
        }
    }

    /// A JSON text of the value: random whitespace, escapes and number spellings.
    fn spell(&self, rng: &mut Rng) -> String {
        const SPACE: &[&str] = &["", "", "", " ", "\n", "\t", "\r\n  ", "   "];
        let ws = |rng: &mut Rng| rng.pick(SPACE).to_string();
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::Number { spelling, .. } => spelling.clone(),
            Json::Str(s) => spell_string(rng, s),
            Json::Array(items) => {
                let mut out = format!("[{}", ws(rng));
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&format!("{},{}", ws(rng), ws(rng)));
                    }
                    out.push_str(&item.spell(rng));
                }
                out.push_str(&format!("{}]", ws(rng)));
                out
            }
            Json::Object(members) => {
                let mut out = format!("{{{}", ws(rng));
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&format!("{},{}", ws(rng), ws(rng)));
                    }
                    let key = spell_string(rng, key);
                    let (a, b) = (ws(rng), ws(rng));
                    out.push_str(&format!("{key}{a}:{b}{}", value.spell(rng)));
                }
                out.push_str(&format!("{}}}", ws(rng)));
                out
            }
        }
    }
}

/// Characters strings and keys are made of: every escape, every UTF-8 length, the edges of the
/// BMP (U+FFFF sorts before U+1F600 in UTF-8 but after it in UTF-16), line separators.
const CHARS: &[char] = &[
    'a',
    'b',
    'z',
    'A',
    'B',
    'Z',
    '0',
    '9',
    ' ',
    '~',
    '"',
    '\\',
    '/',
    '\u{1}',
    '\u{8}',
    '\t',
    '\n',
    '\u{b}',
    '\u{c}',
    '\r',
    '\u{1b}',
    '\u{1f}',
    '\u{7f}',
    '\u{80}',
    'é',
    'ß',
    'ǆ',
    'İ',
    '\u{7ff}',
    '\u{800}',
    '\u{2028}',
    '\u{2029}',
    '\u{e000}',
    '\u{fffd}',
    '\u{ffff}',
    '😀',
    '\u{10000}',
    '\u{10ffff}',
];

/// Keys that sort differently by bytes, by length first (jsonb's order), by UTF-16 and by
/// locale.
const KEYS: &[&str] = &[
    "", "a", "b", "B", "ab", "aa", "aB", "é", "e", "\u{ffff}", "😀", "\u{e000}", "\u{1}", " ", "~",
    "\u{7f}", "id", "amount",
];

fn random_text(rng: &mut Rng, max_len: usize) -> String {
    let len = rng.below(max_len + 1);
    (0..len).map(|_| rng.pick(CHARS)).collect()
}

fn random_key(rng: &mut Rng) -> String {
    if rng.chance(50) {
        rng.pick(KEYS).to_string()
    } else {
        random_text(rng, 6)
    }
}

/// The canonical decimal of ±digits × 10^exponent (digits without leading or trailing zeros,
/// empty for zero).
fn canonical_decimal(negative: bool, digits: &str, exponent: i64) -> String {
    if digits.is_empty() {
        return "0".into();
    }
    let len = digits.len() as i64;
    let plain = if exponent >= 0 {
        format!("{digits}{}", "0".repeat(exponent as usize))
    } else if len + exponent > 0 {
        let point = (len + exponent) as usize;
        format!("{}.{}", &digits[..point], &digits[point..])
    } else {
        format!("0.{}{digits}", "0".repeat((-(len + exponent)) as usize))
    };
    if negative {
        format!("-{plain}")
    } else {
        plain
    }
}

fn exponent_text(rng: &mut Rng, exponent: i64) -> String {
    let e = if rng.chance(50) { "e" } else { "E" };
    let sign = if exponent < 0 {
        "-"
    } else if rng.chance(30) {
        "+"
    } else {
        ""
    };
    let zeros = if rng.chance(10) { "0" } else { "" };
    format!("{e}{sign}{zeros}{}", exponent.abs())
}

fn random_number(rng: &mut Rng) -> Json {
    let negative = rng.chance(30);
    if rng.chance(8) {
        let spelling = rng.pick(&["0", "-0", "0.000", "-0.0", "0e5", "0E-3", "-0.00e+2", "0.0"]);
        return Json::Number {
            canonical: "0".into(),
            spelling: spelling.into(),
        };
    }
    let longest = if rng.chance(10) { 40 } else { 8 };
    let len = 1 + rng.below(longest);
    let digits: String = (0..len)
        .map(|i| {
            let d = if i == 0 || i == len - 1 {
                1 + rng.below(9)
            } else {
                rng.below(10)
            };
            char::from(b'0' + d as u8)
        })
        .collect();
    let exponent = rng.below(41) as i64 - 20;
    let canonical = canonical_decimal(negative, &digits, exponent);
    let sign = if negative { "-" } else { "" };
    let spelling = match rng.below(3) {
        // plain decimal, with trailing fractional zeros
        0 => {
            let plain = canonical_decimal(false, &digits, exponent);
            let zeros = "0".repeat(1 + rng.below(4));
            if plain.contains('.') {
                format!("{sign}{plain}{zeros}")
            } else if rng.chance(50) {
                format!("{sign}{plain}.{zeros}")
            } else {
                format!("{sign}{plain}")
            }
        }
        // one digit before the point, and an exponent
        1 => {
            let mantissa = if len > 1 {
                format!("{}.{}", &digits[..1], &digits[1..])
            } else if rng.chance(50) {
                format!("{digits}.00")
            } else {
                digits.clone()
            };
            let e = exponent_text(rng, exponent + len as i64 - 1);
            format!("{sign}{mantissa}{e}")
        }
        // an integer mantissa, with trailing zeros, and an exponent
        _ => {
            let zeros = rng.below(3);
            let e = exponent_text(rng, exponent - zeros as i64);
            format!("{sign}{digits}{}{e}", "0".repeat(zeros))
        }
    };
    Json::Number {
        canonical,
        spelling,
    }
}

fn random_value(rng: &mut Rng, depth: usize) -> Json {
    let kinds = if depth >= 4 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Json::Null,
        1 => Json::Bool(rng.chance(50)),
        2 => random_number(rng),
        3 | 4 => {
            let max_len = if rng.chance(5) { 200 } else { 12 };
            Json::Str(random_text(rng, max_len))
        }
        5 => {
            let n = rng.below(6);
            Json::Array((0..n).map(|_| random_value(rng, depth + 1)).collect())
        }
        _ => random_object(rng, depth),
    }
}

fn random_object(rng: &mut Rng, depth: usize) -> Json {
    let most = if rng.chance(5) { 40 } else { 7 };
    let n = rng.below(most);
    let mut members: Vec<(String, Json)> = Vec::with_capacity(n);
    for _ in 0..n {
        let key = match members.len() {
            len if len > 0 && rng.chance(10) => members[rng.below(len)].0.clone(),
            _ => random_key(rng),
        };
        members.push((key, random_value(rng, depth + 1)));
    }
    Json::Object(members)
}
