// Request fingerprints, UUIDv7 keys and downstream keys, through SQL.

#[pg_test]
fn request_hash_is_canonical() {
    let same = Spi::get_one::<bool>(
        "SELECT idem_request_hash('{\"b\": [1, 2.50], \"a\": {\"y\": null, \"x\": true}}')
              = idem_request_hash('{\"a\":{\"x\":true,\"y\":null},\"b\":[1,2.5]}')",
    )
    .unwrap();
    assert_eq!(same, Some(true), "key order, whitespace and number spelling do not matter");
    assert_eq!(
        one_text("SELECT idem_request_hash('{}'::jsonb)").as_deref(),
        Some("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"),
        "SHA-256 of the canonical text {{}}"
    );
    let method = Spi::get_one::<bool>(
        "SELECT idem_request_hash('post', '/v1/x', '{\"a\": 1}') = idem_request_hash('POST', '/v1/x', '{\"a\":1}')",
    )
    .unwrap();
    assert_eq!(method, Some(true), "the method is case-insensitive");
    let path = Spi::get_one::<bool>(
        "SELECT idem_request_hash('POST', '/v1/x', '{}') <> idem_request_hash('POST', '/v1/X', '{}')",
    )
    .unwrap();
    assert_eq!(path, Some(true), "the path is not");
    let amounts = Spi::get_one::<bool>(
        "SELECT idem_request_hash('{\"amount\": 12345678901234567890.1}') <> idem_request_hash('{\"amount\": 12345678901234567890.2}')",
    )
    .unwrap();
    assert_eq!(amounts, Some(true), "numbers are never rounded");
    assert_eq!(
        one_text("SELECT idem_request_hash(NULL::jsonb)"),
        one_text("SELECT idem_request_hash('null'::jsonb)")
    );
}

#[pg_test]
fn new_keys_are_time_ordered_uuidv7() {
    let v = Spi::get_one::<bool>(
        "WITH k AS (SELECT idem_new_key() AS a, idem_new_key() AS b)
         SELECT substr(a::text, 15, 1) = '7' AND a <> b FROM k",
    )
    .unwrap();
    assert_eq!(v, Some(true));
    let ordered = Spi::get_one::<bool>(
        "WITH k AS (SELECT idem_new_key() AS a), w AS (SELECT pg_sleep(0.005)), l AS (SELECT idem_new_key() AS b FROM w)
         SELECT a < b FROM k, l",
    )
    .unwrap();
    assert_eq!(ordered, Some(true));
}

#[pg_test]
fn downstream_key_is_the_documented_uuidv5() {
    assert_eq!(
        one_text("SELECT idem_downstream_key('t', 'k', 'charge')::text").as_deref(),
        Some("3dd205ce-246b-5aac-a799-e95732144788")
    );
}

/// Hashes computed outside pg_idem (Python's hashlib over the canonical text written out by hand
/// from the documented rules): the canonical form must never change, or every stored request
/// hash would turn into a mismatch after an upgrade.
#[pg_test]
fn request_hash_matches_independently_computed_vectors() {
    let vectors: &[(&str, &str)] = &[
        (r#"{"b": [1, 2.50, -0, 1E2, 0.000100], "a": {"y": null, "x": true}, "é": "tab\there \"q\" \\ \u0001", "z": 12345678901234567890.10, "": false}"#, "1561978ba4ea209c86e31d5450fd1bb3353e10f3e08c634d7539af00da178e86"),
        (r#""just a string""#, "3fe01def54b1c6cd795b2ebfcbab64150f6a507bce043040c662c682eebfed1e"),
        (r#"[]"#, "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"),
        (r#"3.0"#, "4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce"),
        (r#"null"#, "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"),
        (r#"{"bb":1,"a":2,"ab":3,"b":4}"#, "23e0acb302d2892225ab8b841182377e6b60d0d913600d8fa322cc817101f394"),
        (r#"{"k": "😀\u00e9"}"#, "1b4bb2235fca6cd7ab1667b19805b22809f55f80894fd5a12e2e7dae1558ed8d"),
        (r#"[1, "a", 2.5, [true, "bc", 3], {"x": "yz", "w": 1.10}]"#, "7d674b3652d809458dbd997ad2803dfed506ec21af75bf3ce8bde9ddf5b864bd"),
    ];
    for (input, expected) in vectors {
        let got = Spi::get_one_with_args::<String>(
            "SELECT idem_request_hash($1::jsonb)",
            &[(*input).into()],
        )
        .unwrap();
        assert_eq!(got.as_deref(), Some(*expected), "idem_request_hash({input})");
    }
    // more than 32 members: jsonb stores every 32nd entry as an offset, not a length
    assert_eq!(
        one_text("SELECT idem_request_hash(jsonb_object_agg('k' || g, g)) FROM generate_series(0, 99) AS g").as_deref(),
        Some("64e8d1c7cf2b2eb4be855a4fa6a5721be90147bf298b12b1d8ec72d2d67f7a13")
    );
    assert_eq!(
        one_text("SELECT idem_request_hash('post', '/v1/Charges', '{\"amount\": 42.00}')").as_deref(),
        Some("c0b3ca64c800022b85777c978d374b51eb7765a3d0a7c9181f33c0eb711e91ef"),
        "the canonical [\"POST\",\"/v1/Charges\",{{\"amount\":42}}]"
    );
}
