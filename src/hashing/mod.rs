//! Hashes and UUIDs: request fingerprints, the stored form of request_hash, the per-key lock tag,
//! and the UUIDv7 / UUIDv5 keys pg_idem hands out.

use sha2::{Digest, Sha256};
use uuid::Uuid;

pub mod canonical_json;
pub mod jsonb_walk;

/// Namespace of `idem_downstream_key`: UUIDv5 of the URL "https://pg-idem.dev/downstream-key"
/// in the standard URL namespace (413cc45f-1345-5112-b02e-a86e23d459a6), so any language can
/// recompute a downstream key: uuid5(namespace, tenant + "\0" + key + "\0" + step).
pub const DOWNSTREAM_NAMESPACE: Uuid = Uuid::from_u128(0x413c_c45f_1345_5112_b02e_a86e_23d4_59a6);

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    out
}

/// A SHA-256 that canonical JSON streams into, in chunks (one hasher call per token would cost
/// more than the hashing).
pub struct Sha256Sink {
    hasher: Sha256,
    buffer: [u8; 4096],
    len: usize,
}

impl Sha256Sink {
    pub fn new() -> Self {
        Sha256Sink {
            hasher: Sha256::new(),
            buffer: [0; 4096],
            len: 0,
        }
    }

    /// Lowercase hex of the digest of everything put so far.
    pub fn finish_hex(mut self) -> String {
        self.hasher.update(&self.buffer[..self.len]);
        hex(&self.hasher.finalize())
    }
}

impl Default for Sha256Sink {
    fn default() -> Self {
        Self::new()
    }
}

impl canonical_json::Sink for Sha256Sink {
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buffer.len() {
            self.hasher.update(&self.buffer[..self.len]);
            self.len = 0;
            if bytes.len() > self.buffer.len() {
                self.hasher.update(bytes);
                return;
            }
        }
        self.buffer[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// Bytes of SHA-256 idem.keys keeps of a request_hash.
pub const STORED_HASH_BYTES: usize = 16;

/// What idem.keys stores for a request_hash: the first 128 bits of its SHA-256, the same 16
/// bytes whatever the fingerprint's format. Two different texts compare equal only if someone
/// finds a second preimage of a 128-bit hash (about 2^128 attempts).
pub fn stored_request_hash(request_hash: &str) -> [u8; STORED_HASH_BYTES] {
    let mut prefix = [0u8; STORED_HASH_BYTES];
    prefix.copy_from_slice(&sha256(request_hash.as_bytes())[..STORED_HASH_BYTES]);
    prefix
}

/// The 64-bit lock identity of (tenant, key): the first 8 bytes of SHA-256(tenant, 0x00, key).
/// NUL cannot occur in text, so distinct pairs give distinct inputs.
pub fn key_lock_id(tenant: &str, key: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0u8]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A new UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then random bits.
pub fn new_uuid_v7() -> Uuid {
    Uuid::now_v7()
}

/// The deterministic downstream key of one step of one key: UUIDv5 over tenant, 0x00, key,
/// 0x00, step in `DOWNSTREAM_NAMESPACE`.
pub fn downstream_key(tenant: &str, key: &str, step: &str) -> Uuid {
    let mut name = Vec::with_capacity(tenant.len() + key.len() + step.len() + 2);
    name.extend_from_slice(tenant.as_bytes());
    name.push(0);
    name.extend_from_slice(key.as_bytes());
    name.push(0);
    name.extend_from_slice(step.as_bytes());
    Uuid::new_v5(&DOWNSTREAM_NAMESPACE, &name)
}

/// The Unix time in milliseconds inside `key` when it is a UUIDv7 in any of its text spellings.
pub fn uuid_v7_unix_ms(key: &str) -> Option<u64> {
    let uuid = Uuid::try_parse(key).ok()?;
    if uuid.get_version_num() != 7 {
        return None;
    }
    let b = uuid.as_bytes();
    Some(
        b[..6]
            .iter()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
    )
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn downstream_namespace_is_the_documented_uuid_v5() {
        let derived = Uuid::new_v5(&Uuid::NAMESPACE_URL, b"https://pg-idem.dev/downstream-key");
        assert_eq!(
            DOWNSTREAM_NAMESPACE, derived,
            "constant must equal {derived}"
        );
    }

    #[test]
    fn downstream_key_is_deterministic_and_separated() {
        let a = downstream_key("t", "k", "charge");
        assert_eq!(a, downstream_key("t", "k", "charge"));
        assert_eq!(a.get_version_num(), 5);
        assert_ne!(a, downstream_key("t", "k", "refund"));
        assert_ne!(
            downstream_key("ab", "c", "s"),
            downstream_key("a", "bc", "s")
        );
    }

    #[test]
    fn the_sink_hashes_what_was_put_however_it_was_chunked() {
        use canonical_json::Sink;
        let text: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut chunked = Sha256Sink::new();
        for piece in text.chunks(37).chain([&text[..5000]]) {
            chunked.put(piece);
        }
        let mut whole = text.clone();
        whole.extend_from_slice(&text[..5000]);
        assert_eq!(chunked.finish_hex(), hex(&sha256(&whole)));
        assert_eq!(
            Sha256Sink::new().finish_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn uuid_v7_time_is_read_back() {
        let key = new_uuid_v7();
        let ms = uuid_v7_unix_ms(&key.to_string()).expect("a v7");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(now.abs_diff(ms) < 10_000);
        assert_eq!(uuid_v7_unix_ms("not-a-uuid"), None);
        assert_eq!(
            uuid_v7_unix_ms(&downstream_key("t", "k", "s").to_string()),
            None
        );
    }

    #[test]
    fn lock_ids_differ_for_shifted_boundaries() {
        assert_ne!(key_lock_id("ab", "c"), key_lock_id("a", "bc"));
    }
}
