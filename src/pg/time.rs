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

/// `at + interval`, computed by PostgreSQL's own timestamptz + interval (months and days follow
/// the calendar in the session's time zone, as the same expression in SQL would).
pub fn plus(at: Micros, interval: pg_sys::Datum) -> Micros {
    // SAFETY: timestamptz_pl_interval takes a timestamptz and an interval datum, both non-null
    // (callers pass an interval read from a NOT NULL column or built by pgrx); it raises 22008
    // on overflow.
    unsafe {
        pgrx::direct_function_call::<i64>(
            pg_sys::timestamptz_pl_interval,
            &[Some(pg_sys::Datum::from(at)), Some(interval)],
        )
    }
    .unwrap_or_else(|| errors::internal("adding an interval", "NULL result").raise())
}
