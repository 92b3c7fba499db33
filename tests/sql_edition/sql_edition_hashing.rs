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

const HASHING_SQL: &str = include_str!("../../sql/edition/hashing.sql");

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

// ---------------------------------------------------------------------------------------------
// JSON values: request_hash_of_body and canonical_json
// ---------------------------------------------------------------------------------------------

/// One JSON text through native idem_request_hash and the SQL edition, in one database.
struct Hashed {
    native: String,
    sql: String,
    canonical: String,
}

fn hash_all(db: &mut Client, texts: &[String]) -> Vec<Hashed> {
    db.query(
        "SELECT idem_request_hash(t.v::jsonb), idem.request_hash_of_body(t.v::jsonb), \
                idem.canonical_json(t.v::jsonb) \
           FROM unnest($1::text[]) WITH ORDINALITY AS t(v, n) ORDER BY t.n",
        &[&texts],
    )
    .expect("hash the values")
    .iter()
    .map(|r| Hashed {
        native: r.get(0),
        sql: r.get(1),
        canonical: r.get(2),
    })
    .collect()
}

/// Fixed JSON texts, with their canonical form where it is worth spelling out.
fn corpus() -> Vec<(String, Option<String>)> {
    let mut all: Vec<(String, Option<String>)> = [
        ("{}", Some("{}")),
        ("[]", Some("[]")),
        (" null ", Some("null")),
        ("true", Some("true")),
        ("false", Some("false")),
        ("0", Some("0")),
        ("-0", Some("0")),
        ("-0.000", Some("0")),
        ("0.000", Some("0")),
        ("0.0", Some("0")),
        ("1.50", Some("1.5")),
        ("1E2", Some("100")),
        ("1e-7", Some("0.0000001")),
        ("1e30", Some("1000000000000000000000000000000")),
        ("-1.0e+30", Some("-1000000000000000000000000000000")),
        (
            "12345678901234567890.123456789000",
            Some("12345678901234567890.123456789"),
        ),
        ("-12.340", Some("-12.34")),
        ("0.000100", Some("0.0001")),
        (r#""""#, Some(r#""""#)),
        (
            r#""\u0001\u0002\u0003\u0004\u0005\u0006\u0007\u0008\u0009\u000a\u000b\u000c\u000d\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001F""#,
            Some(r#""\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f""#),
        ),
        (r#""\b\f\n\r\t\"\\\/""#, Some(r#""\b\f\n\r\t\"\\/""#)),
        (
            r#""\u007f\u0080\u00E9\u2028\u2029\uffff\ud83d\ude00\uDBFF\uDFFF""#,
            Some("\"\u{7f}\u{80}é\u{2028}\u{2029}\u{ffff}😀\u{10ffff}\""),
        ),
        ("\"é😀 raw\"", Some("\"é😀 raw\"")),
        (r#"{"b":1,"a":2}"#, Some(r#"{"a":2,"b":1}"#)),
        (
            r#"{"\uffff": 1, "\ud83d\ude00": 2}"#,
            Some("{\"\u{ffff}\":1,\"😀\":2}"),
        ),
        (
            r#"{"\ud83d\ude00": 2, "\uffff": 1, "\ue000": 3}"#,
            Some("{\"\u{e000}\":3,\"\u{ffff}\":1,\"😀\":2}"),
        ),
        (
            r#"{"é":1,"z":2,"Z":3,"":4,"a":5,"aa":6,"ab":7,"b":8,"B":9,"e":10}"#,
            Some(r#"{"":4,"B":9,"Z":3,"a":5,"aa":6,"ab":7,"b":8,"e":10,"z":2,"é":1}"#),
        ),
        (
            r#"{"\n":1,"\u0001":2," ":3,"\"":4,"\\":5}"#,
            Some(r#"{"\u0001":2,"\n":1," ":3,"\"":4,"\\":5}"#),
        ),
        (r#"{"a":1,"a":2}"#, Some(r#"{"a":2}"#)),
        (
            r#"{"z":{"b":[1,{"d":0.10,"c":-0}],"a":null},"y":[[],{},[[]]]}"#,
            Some(r#"{"y":[[],{},[[]]],"z":{"a":null,"b":[1,{"c":0,"d":0.1}]}}"#),
        ),
        (
            r#"{"bb":1,"a":2,"ab":3,"b":4}"#,
            Some(r#"{"a":2,"ab":3,"b":4,"bb":1}"#),
        ),
        (
            r#"[1, "a", 2.5, [true, "bc", 3], {"x": "yz", "w": 1.10}]"#,
            Some(r#"[1,"a",2.5,[true,"bc",3],{"w":1.1,"x":"yz"}]"#),
        ),
    ]
    .iter()
    .map(|(t, c)| (t.to_string(), c.map(str::to_string)))
    .collect();
    // numbers at the edges of numeric: 131072 digits before the point, 16383 after it
    all.push(("1e131071".into(), Some(format!("1{}", "0".repeat(131071)))));
    all.push((
        "-9.5E-16382".into(),
        Some(format!("-0.{}95", "0".repeat(16381))),
    ));
    all.push((
        "1.23456789012345678901234567890e-20".into(),
        Some(format!("0.{}12345678901234567890123456789", "0".repeat(19))),
    ));
    all.push(("1e1000".into(), Some(format!("1{}", "0".repeat(1000)))));
    // more than 32 members: jsonb stores every 32nd entry as an offset, not a length
    let members: Vec<String> = (0..100).map(|i| format!("\"k{i}\": {i}")).collect();
    all.push((format!("{{{}}}", members.join(", ")), None));
    let long: String = "x\"\\\u{1}é😀".repeat(2000);
    all.push((format!("{{\"long\": {}}}", canonical_string(&long)), None));
    all.push((
        format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        Some(format!("{}1{}", "[".repeat(200), "]".repeat(200))),
    ));
    all.push((
        format!("{}0.50{}", "{\"k\": ".repeat(150), "}".repeat(150)),
        Some(format!("{}0.5{}", "{\"k\":".repeat(150), "}".repeat(150))),
    ));
    all
}

/// Hashes computed outside pg_idem, as in src/sql_api/api.rs (request_hash_matches_...).
const VECTORS: &[(&str, &str)] = &[
    (
        r#"{"b": [1, 2.50, -0, 1E2, 0.000100], "a": {"y": null, "x": true}, "é": "tab\there \"q\" \\ \u0001", "z": 12345678901234567890.10, "": false}"#,
        "1561978ba4ea209c86e31d5450fd1bb3353e10f3e08c634d7539af00da178e86",
    ),
    (
        r#""just a string""#,
        "3fe01def54b1c6cd795b2ebfcbab64150f6a507bce043040c662c682eebfed1e",
    ),
    (
        "[]",
        "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
    ),
    (
        "3.0",
        "4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce",
    ),
    (
        "null",
        "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
    ),
    (
        "{}",
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    ),
    (
        r#"{"bb":1,"a":2,"ab":3,"b":4}"#,
        "23e0acb302d2892225ab8b841182377e6b60d0d913600d8fa322cc817101f394",
    ),
    (
        r#"{"k": "😀\u00e9"}"#,
        "1b4bb2235fca6cd7ab1667b19805b22809f55f80894fd5a12e2e7dae1558ed8d",
    ),
    (
        r#"[1, "a", 2.5, [true, "bc", 3], {"x": "yz", "w": 1.10}]"#,
        "7d674b3652d809458dbd997ad2803dfed506ec21af75bf3ce8bde9ddf5b864bd",
    ),
];

#[test]
fn json_values_hash_as_native() {
    let server = Server::start(&[]);
    for (database, mut db) in databases(&server) {
        // the fixed corpus
        let corpus = corpus();
        let texts: Vec<String> = corpus.iter().map(|(t, _)| t.clone()).collect();
        for ((text, canonical), got) in corpus.iter().zip(hash_all(&mut db, &texts)) {
            let shown: String = text.chars().take(300).collect();
            assert_eq!(
                got.sql,
                got.native,
                "[{database}] request_hash_of_body({shown}) (SQL canonical text {:?})",
                got.canonical.chars().take(300).collect::<String>()
            );
            if let Some(canonical) = canonical {
                assert!(
                    got.canonical == *canonical,
                    "[{database}] canonical_json({shown}): {:?}, expected {:?}",
                    got.canonical.chars().take(300).collect::<String>(),
                    canonical.chars().take(300).collect::<String>()
                );
            }
        }
        // vectors computed outside pg_idem
        let texts: Vec<String> = VECTORS.iter().map(|(t, _)| t.to_string()).collect();
        for ((text, expected), got) in VECTORS.iter().zip(hash_all(&mut db, &texts)) {
            assert_eq!(
                (got.sql.as_str(), got.native.as_str()),
                (*expected, *expected),
                "[{database}] hashes of {text}"
            );
        }
        // values no JSON text spells: numeric NaN and infinities become strings in jsonb; SQL
        // NULL is JSON null
        for expression in [
            "to_jsonb('NaN'::numeric)",
            "to_jsonb('-Infinity'::numeric)",
            "jsonb_build_object('n', 'Infinity'::numeric, 'f', 'NaN'::float8, 'x', 1e-20::float8)",
            "NULL::jsonb",
            "(SELECT jsonb_object_agg('k' || g, g) FROM generate_series(0, 99) AS g)",
        ] {
            let row = db
                .query_one(
                    &format!(
                        "SELECT idem_request_hash(v), idem.request_hash_of_body(v), \
                         idem.canonical_json(v) FROM (SELECT {expression} AS v) AS s"
                    ),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{expression}: {e}"));
            let (native, sql, canonical): (String, String, String) =
                (row.get(0), row.get(1), row.get(2));
            assert_eq!(
                sql, native,
                "[{database}] request_hash_of_body({expression}), canonical {canonical}"
            );
        }
        // random values from a seeded generator: the canonical text against the writer above,
        // the hash against native
        let mut rng = Rng(RANDOM_VALUES_SEED);
        let values: Vec<Json> = (0..400)
            .map(|i| {
                if i % 4 == 0 {
                    random_value(&mut rng, 0)
                } else {
                    random_object(&mut rng, 0)
                }
            })
            .collect();
        let texts: Vec<String> = values.iter().map(|v| v.spell(&mut rng)).collect();
        for ((value, text), got) in values.iter().zip(&texts).zip(hash_all(&mut db, &texts)) {
            let expected = value.canonical();
            assert!(
                got.canonical == expected,
                "[{database}] canonical_json of {text:?}:\n     got {:?}\nexpected {expected:?}",
                got.canonical
            );
            assert_eq!(
                got.sql, got.native,
                "[{database}] request_hash_of_body({text:?}), canonical {expected:?}"
            );
        }
    }
}

/// The seed of the random values (a constant: a failure reproduces).
const RANDOM_VALUES_SEED: u64 = 0x5eed_1de0_4a54;

#[test]
fn request_hashes_of_requests_are_native() {
    let server = Server::start(&[]);
    let mut db = server.client();
    load(&mut db);
    // the method is upper-cased in ASCII only: not ǆ (ǅ, Ǆ), ß (SS), ı, ſ (S), é
    let methods = [
        "POST",
        "post",
        "patch",
        "pAtCh",
        "ǆ",
        "ǅ",
        "ß",
        "i",
        "ı",
        "ſ",
        "é",
        "ﬀ",
        "get\n",
        "\"q\"",
        "back\\slash",
        "",
        " put ",
        "😀",
        "\u{1}x",
    ];
    let paths = [
        "/v1/charges",
        "/v1/Charges",
        "",
        "/ü/😀?a=1&b=\"2\"",
        "\t\u{1}\u{1f}\u{7f}",
        "\\",
        "/\u{ffff}/\u{10ffff}/\u{2028}",
    ];
    let bodies = [
        None,
        Some("null"),
        Some("{}"),
        Some(r#"{"b": [1, 2.50], "a": {"y": null, "x": true}}"#),
        Some(r#""s""#),
        Some(r#"{"amount": 42.00, "É": "\n"}"#),
    ];
    let (mut ms, mut ps, mut bs) = (Vec::new(), Vec::new(), Vec::new());
    for m in methods {
        for p in paths {
            for b in bodies {
                ms.push(m.to_string());
                ps.push(p.to_string());
                bs.push(b.map(str::to_string));
            }
        }
    }
    let rows = db
        .query(
            "SELECT idem_request_hash(r.m, r.p, r.b::jsonb), \
                    idem.request_hash_of_request(r.m, r.p, r.b::jsonb) \
               FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(m, p, b, n) \
              ORDER BY r.n",
            &[&ms, &ps, &bs],
        )
        .expect("hash the requests");
    assert_eq!(rows.len(), ms.len());
    for (i, row) in rows.iter().enumerate() {
        let (native, sql): (String, String) = (row.get(0), row.get(1));
        assert_eq!(
            sql, native,
            "request_hash_of_request({:?}, {:?}, {:?})",
            ms[i], ps[i], bs[i]
        );
    }
    // the vector of src/sql_api/api.rs: the canonical ["POST","/v1/Charges",{"amount":42}]
    let row = db
        .query_one(
            "SELECT idem_request_hash('post', '/v1/Charges', '{\"amount\": 42.00}'), \
                    idem.request_hash_of_request('post', '/v1/Charges', '{\"amount\": 42.00}')",
            &[],
        )
        .unwrap();
    let expected = "c0b3ca64c800022b85777c978d374b51eb7765a3d0a7c9181f33c0eb711e91ef";
    assert_eq!(
        (
            row.get::<_, String>(0).as_str(),
            row.get::<_, String>(1).as_str()
        ),
        (expected, expected),
        "request_hash('post', '/v1/Charges', '{{\"amount\": 42.00}}')"
    );
    // NULLs: a NULL body is JSON null (as native); a NULL method or path gives NULL (native
    // raises 22004, which the SQL edition's wrapper does before calling)
    let row = db
        .query_one(
            "SELECT idem.request_hash_of_request(NULL, '/p', '{}'), \
                    idem.request_hash_of_request('POST', NULL, '{}'), \
                    idem.request_hash_of_body(NULL) = idem_request_hash(NULL::jsonb), \
                    idem.canonical_json(NULL)",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), None, "NULL method");
    assert_eq!(row.get::<_, Option<String>>(1), None, "NULL path");
    assert!(row.get::<_, bool>(2), "request_hash_of_body(NULL)");
    assert_eq!(row.get::<_, String>(3), "null", "canonical_json(NULL)");
}

// ---------------------------------------------------------------------------------------------
// SHA-1 and UUIDv5: downstream_key
// ---------------------------------------------------------------------------------------------

/// SHA-1 (FIPS 180-4), independent of the SQL one.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xefcd_ab89,
        0x98ba_dcfe,
        0x1032_5476,
        0xc3d2_e1f0,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&(data.len() as u64 * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (word, bytes) in w.iter_mut().zip(block.chunks(4)) {
            *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                _ => (b ^ c ^ d, 0xca62_c1d6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// UUIDv5 (RFC 9562) of tenant 0x00 key 0x00 step in DOWNSTREAM_NAMESPACE, hyphenated.
fn downstream_key(tenant: &str, key: &str, step: &str) -> String {
    let mut name = vec![
        0x41, 0x3c, 0xc4, 0x5f, 0x13, 0x45, 0x51, 0x12, 0xb0, 0x2e, 0xa8, 0x6e, 0x23, 0xd4, 0x59,
        0xa6,
    ];
    name.extend_from_slice(tenant.as_bytes());
    name.push(0);
    name.extend_from_slice(key.as_bytes());
    name.push(0);
    name.extend_from_slice(step.as_bytes());
    let mut b = sha1(&name);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[test]
fn sha1_and_downstream_keys_are_native() {
    let server = Server::start(&[]);
    let mut db = server.client();
    load(&mut db);
    // published vectors (FIPS 180-2 appendix A, and 1000 'a')
    for (input, expected) in [
        ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        ("abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
        ),
        (
            "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
            "a49b2446a02c645bf419f995b67091253a04a259",
        ),
        (&"a".repeat(1000), "291e9a6c66994949b57ba5e650361e98fc36b1ba"),
    ] {
        let got: String = db
            .query_one(
                "SELECT encode(idem.sha1(convert_to($1, 'UTF8')), 'hex')",
                &[&input],
            )
            .unwrap()
            .get(0);
        assert_eq!(got, expected, "sha1 of {} bytes", input.len());
        assert_eq!(hex(&sha1(input.as_bytes())), expected, "the test's own sha1");
    }
    // every length across the padding boundaries (55, 56, 63, 64 bytes), random bytes
    let mut rng = Rng(0x05a1);
    let inputs: Vec<Vec<u8>> = (0..=200)
        .map(|len| (0..len).map(|_| rng.next() as u8).collect())
        .collect();
    let rows = db
        .query(
            "SELECT encode(idem.sha1(b.v), 'hex') FROM unnest($1::bytea[]) WITH ORDINALITY AS b(v, n) \
             ORDER BY b.n",
            &[&inputs],
        )
        .unwrap();
    for (input, row) in inputs.iter().zip(&rows) {
        assert_eq!(
            row.get::<_, String>(0),
            hex(&sha1(input)),
            "sha1 of {}",
            hex(input)
        );
    }
    assert!(
        db.query_one("SELECT idem.sha1(NULL) IS NULL", &[])
            .unwrap()
            .get::<_, bool>(0),
        "sha1(NULL)"
    );

    // downstream keys: tenants and keys within native's limits (255 characters, 2400 bytes
    // together), steps up to 256 characters, empty steps
    let tenants = [
        "t".to_string(),
        "tenant-1".into(),
        "é".into(),
        "😀 \\ \"".into(),
        "x".repeat(255),
    ];
    let keys = [
        "k".to_string(),
        "order-42".into(),
        "ǆ\u{1}\u{ffff}".into(),
        "é".repeat(255),
    ];
    let steps = [
        String::new(),
        "charge".into(),
        "refund".into(),
        "ß\u{10ffff}".into(),
        "\\".into(),
        "s".repeat(256),
        "😀".repeat(256),
    ];
    let (mut ts, mut ks, mut ss) = (Vec::new(), Vec::new(), Vec::new());
    for t in &tenants {
        for k in &keys {
            for s in &steps {
                ts.push(t.clone());
                ks.push(k.clone());
                ss.push(s.clone());
            }
        }
    }
    let rows = db
        .query(
            "SELECT idem_downstream_key(d.t, d.k, d.s)::text, idem.downstream_key(d.t, d.k, d.s)::text \
               FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS d(t, k, s, n) \
              ORDER BY d.n",
            &[&ts, &ks, &ss],
        )
        .expect("downstream keys");
    assert_eq!(rows.len(), ts.len());
    for (i, row) in rows.iter().enumerate() {
        let (native, sql): (String, String) = (row.get(0), row.get(1));
        let shown = |s: &str| s.chars().take(20).collect::<String>();
        assert_eq!(
            sql,
            native,
            "downstream_key({:?}, {:?}, {:?}) ({} + {} + {} bytes)",
            shown(&ts[i]),
            shown(&ks[i]),
            shown(&ss[i]),
            ts[i].len(),
            ks[i].len(),
            ss[i].len()
        );
        assert_eq!(
            sql,
            downstream_key(&ts[i], &ks[i], &ss[i]),
            "downstream_key({:?}, {:?}, {:?}) against the test's UUIDv5",
            shown(&ts[i]),
            shown(&ks[i]),
            shown(&ss[i])
        );
    }
    // the documented value (src/sql_api/extras.rs)
    let got: String = db
        .query_one("SELECT idem.downstream_key('t', 'k', 'charge')::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(got, "3dd205ce-246b-5aac-a799-e95732144788");
}

// ---------------------------------------------------------------------------------------------
// key_lock_id and stored_request_hash: against what native locks and stores. The SQL edition's
// lock id is native's of the key with its secret in front (sql/edition/hashing.sql: its locks
// are in a space any role can take, natively in one none can)
// ---------------------------------------------------------------------------------------------

#[test]
fn lock_ids_and_stored_hashes_are_native() {
    let server = Server::start(&[]);
    let mut db = server.client();
    load(&mut db);
    // a column of one's own sends native claims down the SPI path, which takes the key's
    // advisory lock (space 478, pg_locks.objsubid) and keeps it until the transaction ends
    db.batch_execute("ALTER TABLE idem.keys ADD COLUMN note text")
        .unwrap();
    let pairs = [
        ("t", "k", "h"),
        ("ab", "c", ""),
        ("a", "bc", "idem_request_hash"),
        (
            "é",
            "😀",
            "c0b3ca64c800022b85777c978d374b51eb7765a3d0a7c9181f33c0eb711e91ef",
        ),
        ("tenant\\1", "key \"2\"", "\\x00"),
        ("\u{ffff}", "\u{1}\u{1f}", "ß\u{10ffff}"),
        ("default", "01966b3a-8c9e-7d3f-9a2b-000000000000", "x"),
    ];
    let mut long = vec![("L".repeat(255), "é".repeat(255), "h".repeat(512))];
    long.extend(
        pairs
            .iter()
            .map(|(t, k, h)| (t.to_string(), k.to_string(), h.to_string())),
    );
    for (tenant, key, hash) in &long {
        let mut tx = db.transaction().unwrap();
        let outcome: String = tx
            .query_one(
                "SELECT outcome FROM idem_claim($1, $2, $3)",
                &[tenant, key, hash],
            )
            .unwrap()
            .get(0);
        assert_eq!(outcome, "claimed", "claim ({tenant:?}, {key:?})");
        let row = tx
            .query_one(
                "SELECT (l.classid::bigint << 32) | l.objid::bigint, idem.key_lock_id($1, $2), \
                        k.request_hash, idem.stored_request_hash($3), \
                        ('x' || encode(substr(sha256(convert_to($1, 'UTF8') || '\\x00'::bytea \
                                || convert_to($2, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint, \
                        ('x' || encode(substr(sha256((SELECT s.secret FROM idem.key_lock_secret AS s) \
                                || convert_to($1, 'UTF8') || '\\x00'::bytea \
                                || convert_to($2, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint \
                   FROM pg_locks AS l, idem.keys AS k \
                  WHERE l.locktype = 'advisory' AND l.objsubid = 478 \
                    AND l.pid = pg_backend_pid() AND k.tenant = $1 AND k.key = $2",
                &[tenant, key, hash],
            )
            .unwrap_or_else(|e| panic!("the key lock of ({tenant:?}, {key:?}): {e}"));
        let (native_lock, sql_lock): (i64, i64) = (row.get(0), row.get(1));
        let (native_formula, secret_formula): (i64, i64) = (row.get(4), row.get(5));
        // the bytes native hashes are the ones the formula hashes, and the SQL edition's the
        // same with the secret in front
        assert_eq!(
            native_formula, native_lock,
            "native key lock of ({tenant:?}, {key:?}): {:016x}",
            native_lock as u64
        );
        assert_eq!(
            sql_lock, secret_formula,
            "key_lock_id({tenant:?}, {key:?}) with the secret"
        );
        assert_ne!(
            sql_lock, native_lock,
            "key_lock_id({tenant:?}, {key:?}) is keyed"
        );
        let (native_hash, sql_hash): (Vec<u8>, Vec<u8>) = (row.get(2), row.get(3));
        assert_eq!(
            hex(&sql_hash),
            hex(&native_hash),
            "stored_request_hash({hash:?})"
        );
        tx.rollback().unwrap();
    }
    // and against SHA-256 computed by PostgreSQL from the UTF-8 bytes, for random texts
    let mut rng = Rng(0x10c4);
    let texts: Vec<String> = (0..300).map(|_| random_text(&mut rng, 30)).collect();
    let rows = db
        .query(
            "SELECT t.v, idem.key_lock_id(t.v, t.v || 'k'), \
                    ('x' || encode(substr(sha256((SELECT s.secret FROM idem.key_lock_secret AS s) || \
                                                  convert_to(t.v, 'UTF8') || '\\x00'::bytea || \
                                                  convert_to(t.v || 'k', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint, \
                    idem.stored_request_hash(t.v), substr(sha256(convert_to(t.v, 'UTF8')), 1, 16) \
               FROM unnest($1::text[]) AS t(v)",
            &[&texts],
        )
        .unwrap();
    for row in &rows {
        let text: String = row.get(0);
        assert_eq!(
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            "key_lock_id({text:?}, {text:?} || 'k')"
        );
        assert_eq!(
            row.get::<_, Vec<u8>>(3),
            row.get::<_, Vec<u8>>(4),
            "stored_request_hash({text:?})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// UUIDv7: new_uuid_v7 and uuid_v7_unix_ms
// ---------------------------------------------------------------------------------------------

fn unix_ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The Unix milliseconds of a hyphenated UUID, read in Rust.
fn unix_ms_of(uuid: &str) -> i64 {
    i64::from_str_radix(&uuid.replace('-', "")[..12], 16).unwrap()
}

/// The spellings uuid::Uuid::try_parse accepts of a hyphenated lowercase UUID.
fn spellings(u: &str) -> Vec<String> {
    let simple = u.replace('-', "");
    let mixed: String = u
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    vec![
        u.to_string(),
        u.to_uppercase(),
        mixed.clone(),
        simple.clone(),
        simple.to_uppercase(),
        format!("{{{u}}}"),
        format!("{{{}}}", u.to_uppercase()),
        format!("urn:uuid:{u}"),
        format!("URN:UUID:{u}"),
        format!("uRn:UuId:{mixed}"),
    ]
}

/// Spellings try_parse refuses.
fn misspellings(u: &str) -> Vec<String> {
    let simple = u.replace('-', "");
    vec![
        format!("{{{simple}}}"),
        format!("urn:uuid:{simple}"),
        format!("urn:uuid:{{{u}}}"),
        format!(" {u}"),
        format!("{u} "),
        format!("{u}\n"),
        format!("{{{u}"),
        format!("{u}}}"),
        format!("{simple}0"),
        simple[1..].to_string(),
        format!("{}-{}", &simple[..8], &simple[8..]),
        // hyphens out of place, the length right
        format!(
            "{}-{}-{}-{}-{}",
            &simple[..7],
            &simple[7..11],
            &simple[11..15],
            &simple[15..19],
            &simple[19..]
        ),
        format!("g{}", &u[1..]),
        format!("é{}", &u[2..]),
        format!("{}é", &u[..34]),
        format!("urm:uuid:{u}"),
        format!("urn-uuid:{u}"),
        format!("xurn:uuid:{u}"),
        format!("ürn:uuid:{u}"),
        format!("({u})"),
    ]
}

#[test]
fn uuid_v7_times_are_read_as_native_reads_them() {
    let server = Server::start(&[]);
    let mut db = server.client();
    load(&mut db);
    // keys made by native idem_new_key(), in every spelling: the time the test reads
    let keys: Vec<String> = db.column(
        "SELECT idem_new_key()::text FROM generate_series(1, 50)",
        &[],
    );
    for key in &keys {
        let expected = unix_ms_of(key);
        for spelling in spellings(key) {
            let got: Option<i64> = db
                .query_one("SELECT idem.uuid_v7_unix_ms($1)", &[&spelling])
                .unwrap()
                .get(0);
            assert_eq!(got, Some(expected), "uuid_v7_unix_ms({spelling:?})");
        }
        for spelling in misspellings(key) {
            let got: Option<i64> = db
                .query_one("SELECT idem.uuid_v7_unix_ms($1)", &[&spelling])
                .unwrap()
                .get(0);
            assert_eq!(got, None, "uuid_v7_unix_ms({spelling:?})");
        }
    }
    // what native reads as a UUIDv7: with pg_idem.reject_stale_uuidv7, a claim of a key whose
    // time lies before now - ttl is refused as stale_key; any other key is claimed
    db.batch_execute("SET pg_idem.reject_stale_uuidv7 = on")
        .unwrap();
    let old = "01234567-89ab-7def-8123-456789abcdef";
    let mut candidates = spellings(old);
    candidates.extend(misspellings(old));
    candidates.extend(
        [
            "01234567-89ab-7def-0123-456789abcdef", // variant 0: still version 7
            "01234567-89ab-7def-f123-456789abcdef",
            "01234567-89ab-4def-8123-456789abcdef", // version 4
            "01234567-89ab-8def-8123-456789abcdef", // version 8
            "00000000-0000-7000-8000-000000000000",
            "0123456789AB7DEF8123456789ABCDEF",
            "not-a-uuid",
            "x",
        ]
        .map(str::to_string),
    );
    for candidate in &candidates {
        let row = db
            .query_one(
                "SELECT (SELECT outcome FROM idem_claim('stale', $1, 'h')), idem.uuid_v7_unix_ms($1)",
                &[candidate],
            )
            .unwrap_or_else(|e| panic!("claim {candidate:?}: {e}"));
        let (outcome, ms): (String, Option<i64>) = (row.get(0), row.get(1));
        let native_reads_v7 = outcome == "stale_key";
        assert_eq!(
            ms.is_some(),
            native_reads_v7,
            "uuid_v7_unix_ms({candidate:?}) = {ms:?}, native claim: {outcome}"
        );
        if let Some(ms) = ms {
            let hex: String = candidate
                .chars()
                .filter(char::is_ascii_hexdigit)
                .collect::<String>();
            // the 32 hex digits are the last ones ('urn:uuid:' holds a 'd')
            let digits = &hex[hex.len() - 32..];
            assert_eq!(
                ms,
                i64::from_str_radix(&digits[..12], 16).unwrap(),
                "uuid_v7_unix_ms({candidate:?})"
            );
        }
    }
    // the time itself, as the stale-key rule reads it: a minute before and after now - ttl
    for (offset_ms, stale) in [(-60_000, true), (60_000, false)] {
        let ms = unix_ms_now() - 3_600_000 + offset_ms;
        let key = format!(
            "{:08x}-{:04x}-7abc-8def-0123456789ab",
            ms >> 16,
            ms & 0xffff
        );
        let row = db
            .query_one(
                "SELECT (SELECT outcome FROM idem_claim('stale', $1, 'h', ttl => '1 hour')), \
                        idem.uuid_v7_unix_ms($1)",
                &[&key],
            )
            .unwrap();
        let (outcome, got): (String, Option<i64>) = (row.get(0), row.get(1));
        assert_eq!(got, Some(ms), "uuid_v7_unix_ms({key:?})");
        assert_eq!(
            outcome == "stale_key",
            stale,
            "native claim of {key}: {outcome}"
        );
    }
    assert_eq!(
        db.query_one("SELECT idem.uuid_v7_unix_ms(NULL)", &[])
            .unwrap()
            .get::<_, Option<i64>>(0),
        None
    );
}

#[test]
fn new_uuid_v7_makes_time_ordered_unique_uuidv7() {
    let server = Server::start(&[]);
    let mut db = server.client();
    load(&mut db);
    let before = unix_ms_now();
    let keys: Vec<String> = db
        .column("SELECT k::text FROM (SELECT idem.new_uuid_v7() AS k, g FROM generate_series(1, 10000) AS g) AS s \
             ORDER BY g",
            &[],);
    let after = unix_ms_now();
    assert_eq!(keys.len(), 10_000);
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "10,000 keys, all different");
    let mut previous = String::new();
    for key in &keys {
        let simple = key.replace('-', "");
        assert_eq!(&simple[12..13], "7", "version 7: {key}");
        assert!(
            matches!(&simple[16..17], "8" | "9" | "a" | "b"),
            "variant 10: {key}"
        );
        let ms = unix_ms_of(key);
        assert!(
            (before..=after).contains(&ms),
            "{key}: {ms} ms is not between {before} and {after}"
        );
        // made in this order within one backend: ordered to the microsecond (time and the
        // 12 bits of sub-millisecond time before the variant)
        assert!(
            simple[..16] >= *previous,
            "{key} made after a key starting {previous}"
        );
        previous = simple[..16].to_string();
    }
    // as native: one key is a UUIDv7 of the same shape, and a later call a later key
    let row = db
        .query_one(
            "WITH a AS (SELECT idem.new_uuid_v7() AS k), w AS (SELECT pg_sleep(0.005)), \
                  b AS (SELECT idem.new_uuid_v7() AS k FROM w) \
             SELECT a.k < b.k, idem.uuid_v7_unix_ms(a.k::text) IS NOT NULL, \
                    idem.uuid_v7_unix_ms(idem_new_key()::text) IS NOT NULL FROM a, b",
            &[],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0), "a key made 5 ms later sorts after");
    assert!(row.get::<_, bool>(1), "new_uuid_v7 reads back as a UUIDv7");
    assert!(row.get::<_, bool>(2), "so does native idem_new_key");
}
