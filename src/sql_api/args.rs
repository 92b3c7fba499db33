//! Checks of the arguments every SQL function shares: each failure raises the documented
//! SQLSTATE with a message naming the argument, before anything is read or stored.

use pgrx::datum::Interval;

use crate::errors::{self, IdemError};
use crate::pg::datum::Jsonb;
use crate::pg::guc;

/// Longest request_hash accepted, in characters.
pub const MAX_REQUEST_HASH_CHARS: usize = 512;

/// Most bytes tenant and key may take together: a btree index entry holds at most 2704 bytes.
pub const MAX_KEY_BYTES: usize = 2400;

/// The longest lease or ttl accepted, 100 years as an interval counts them (a month is 30 days,
/// so 1200 months are 36,000 days): past it timestamps would approach the end of PostgreSQL's
/// range, and no idempotency window needs more.
const MAX_DURATION_US: i128 = 1200 * 30 * 86_400 * 1_000_000;

/// A tenant, key or stream name: not NULL, not empty, at most pg_idem.max_key_length characters.
pub fn name<'a>(value: Option<&'a str>, argument: &str) -> Result<&'a str, IdemError> {
    let value = value.ok_or_else(|| {
        errors::null_argument(
            argument,
            "Pass a non-empty text; single-tenant applications can use a constant tenant such as 'default'.",
        )
    })?;
    if value.is_empty() {
        return Err(errors::invalid_argument(
            argument,
            "must not be empty",
            format!("An empty {argument} cannot identify anything."),
            "Pass a non-empty text.",
        ));
    }
    let max = guc::max_key_length();
    let chars = value.chars().count();
    if chars > max {
        return Err(errors::invalid_argument(
            argument,
            "is too long",
            format!("It has {chars} characters; pg_idem.max_key_length allows {max}."),
            "Use a shorter value, such as a UUID from idem_new_key(), or raise pg_idem.max_key_length.",
        ));
    }
    Ok(value)
}

/// A tenant and key that fit the index together.
pub fn tenant_and_key<'a>(
    tenant: Option<&'a str>,
    key: Option<&'a str>,
    key_argument: &str,
) -> Result<(&'a str, &'a str), IdemError> {
    let tenant = name(tenant, "tenant")?;
    let key = name(key, key_argument)?;
    let bytes = tenant.len() + key.len();
    if bytes > MAX_KEY_BYTES {
        return Err(errors::invalid_argument(
            key_argument,
            "is too long",
            format!("tenant and {key_argument} take {bytes} bytes together; at most {MAX_KEY_BYTES} fit in the index."),
            "Use shorter values, such as a UUID from idem_new_key().",
        ));
    }
    Ok((tenant, key))
}

/// A request fingerprint: not NULL, at most 512 characters (any format; compared exactly).
pub fn request_hash(value: Option<&str>) -> Result<&str, IdemError> {
    let value = value.ok_or_else(|| {
        errors::null_argument(
            "request_hash",
            "Pass a fingerprint of the request, for example idem_request_hash(method, path, body), or '' to skip the check.",
        )
    })?;
    let chars = value.chars().count();
    if chars > MAX_REQUEST_HASH_CHARS {
        return Err(errors::invalid_argument(
            "request_hash",
            "is too long",
            format!("It has {chars} characters; at most {MAX_REQUEST_HASH_CHARS} are accepted."),
            "Pass a digest of the request, such as idem_request_hash(method, path, body), not the request itself.",
        ));
    }
    Ok(value)
}

pub fn fence(value: Option<i64>) -> Result<i64, IdemError> {
    value.ok_or_else(|| {
        errors::null_argument(
            "fence",
            "Pass the fence that idem_claim returned with outcome 'claimed'.",
        )
    })
}

/// A lease or ttl in microseconds: the argument, or the setting when the argument is NULL.
/// A day counts as 24 hours and a month as 30 days.
pub fn duration(
    value: Option<Interval>,
    argument: &str,
    default_us: i64,
) -> Result<i64, IdemError> {
    let Some(interval) = value else {
        return Ok(default_us);
    };
    let micros = interval.as_micros();
    if micros <= 0 {
        return Err(errors::invalid_argument(
            argument,
            "must be positive",
            format!("Got {micros} microseconds."),
            "Pass a positive interval such as '30 seconds', or NULL for the default setting.",
        ));
    }
    if micros > MAX_DURATION_US {
        return Err(errors::invalid_argument(
            argument,
            "is too long",
            format!("Got {micros} microseconds; at most 100 years are accepted, counted as 36000 days (an interval's month is 30 days)."),
            "Pass a shorter interval, or NULL for the default setting.",
        ));
    }
    Ok(micros as i64)
}

/// A response body or checkpoint payload within pg_idem.max_response_bytes.
pub fn payload<'m>(
    value: Option<Jsonb<'m>>,
    argument: &str,
) -> Result<Option<Jsonb<'m>>, IdemError> {
    if let Some(body) = value {
        let size = body.raw_size();
        let max = guc::max_response_bytes();
        if size > max {
            return Err(errors::too_large(
                argument,
                format!("It takes {size} bytes; pg_idem.max_response_bytes allows {max}."),
                "Store a reference to the response (an id or a URL) instead of the whole body, or raise pg_idem.max_response_bytes.",
            ));
        }
    }
    Ok(value)
}

/// Longest checkpoint phase or downstream step accepted, in characters: they name a step of
/// the caller's work ('charged', 'shipment-2'); the phase is stored with the key.
pub const MAX_LABEL_CHARS: usize = 256;

/// The name of a step (a checkpoint phase, a downstream call): present and at most
/// MAX_LABEL_CHARS characters.
pub fn label<'a>(value: Option<&'a str>, argument: &str, hint: &str) -> Result<&'a str, IdemError> {
    let value = required(value, argument, hint)?;
    if value.chars().nth(MAX_LABEL_CHARS).is_some() {
        return Err(errors::invalid_argument(
            argument,
            "is too long",
            format!(
                "It has {} characters; at most {MAX_LABEL_CHARS} are accepted.",
                value.chars().count()
            ),
            hint,
        ));
    }
    Ok(value)
}

/// A text argument that only has to be present.
pub fn required<'a>(
    value: Option<&'a str>,
    argument: &str,
    hint: &str,
) -> Result<&'a str, IdemError> {
    value.ok_or_else(|| errors::null_argument(argument, hint))
}

/// Raises the error of a failed check.
pub fn check<T>(result: Result<T, IdemError>) -> T {
    result.unwrap_or_else(|e| e.raise())
}

/// A batch of `len` elements (counted before any is read) within pg_idem.max_batch_keys.
pub fn check_batch_size(len: usize, argument: &str) {
    let max = guc::max_batch_keys();
    if len > max {
        errors::too_large(
            argument,
            format!("The batch has {len} elements; pg_idem.max_batch_keys allows {max}."),
            "Split the batch, or raise pg_idem.max_batch_keys.",
        )
        .raise();
    }
}
