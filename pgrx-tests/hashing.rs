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
