//! Time as PostgreSQL keeps it: microseconds since 2000-01-01 UTC (TimestampTz), the server
//! clock, and the SQL value of a timestamp.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

use crate::errors;

/// Microseconds since 2000-01-01 UTC: PostgreSQL's TimestampTz.
pub type Micros = i64;

/// The server clock, read once per call so that all comparisons in one call agree.
pub fn clock() -> Micros {
    // SAFETY: reads the system clock; no preconditions.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// The timestamptz SQL value of `micros`.
pub fn timestamptz(micros: Micros) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(micros)
        .unwrap_or_else(|e| errors::internal("converting a timestamp", format!("{e:?}")).raise())
}
