//! Keys and locks: downstream_key (SHA-1 and UUIDv5), and key_lock_id and stored_request_hash
//! against what native locks and stores.

use super::*;

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
