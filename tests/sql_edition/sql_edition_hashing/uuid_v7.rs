//! UUIDv7: new_uuid_v7 and uuid_v7_unix_ms, and the claims the stale-key rule refuses.

use super::*;

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
