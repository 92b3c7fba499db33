//! JSON values: request_hash_of_body and canonical_json, on a fixed corpus, test vectors and
//! random values, against native and against the independent writer in main.rs.

use super::*;

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
