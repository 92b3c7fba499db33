//! Time as PostgreSQL keeps it: microseconds since 2000-01-01 UTC (TimestampTz), the server
//! clock, and the SQL value of a timestamp.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;

use crate::errors;

/// Microseconds since 2000-01-01 UTC: PostgreSQL's TimestampTz (defined with the decisions
/// that compare such times, in rules/).
pub use pg_idem_rules::Micros;

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

/// An interval of `micros` microseconds, with no months or days: adding it to a time never
/// depends on the calendar or the session's time zone, so it agrees with `rules::key_row::after`.
/// The one builder of the intervals pg_idem stores (idem.keys.ttl) and passes to SQL.
pub fn interval(micros: i64) -> pgrx::datum::Interval {
    pgrx::datum::Interval::new(0, 0, micros)
        .unwrap_or_else(|e| errors::internal("building an interval", format!("{e:?}")).raise())
}

/// The microseconds of an interval datum read from idem.keys.ttl. pg_idem stores only
/// intervals of microseconds (`interval`); one set by hand with days or months counts a day as
/// 24 hours and a month as 30 days, as PostgreSQL does when it compares intervals.
pub fn interval_micros(datum: pg_sys::Datum) -> i64 {
    // SAFETY: callers pass a non-null interval datum (idem.keys.ttl is NOT NULL and its type is
    // checked by `store::definition`); an interval is passed by reference to a fixed-size
    // struct, which lives as long as the row the datum was read from.
    let value = unsafe { &*datum.cast_mut_ptr::<pg_sys::Interval>() };
    const DAY: i64 = 86_400_000_000;
    i64::from(value.month)
        .saturating_mul(30 * DAY)
        .saturating_add(i64::from(value.day).saturating_mul(DAY))
        .saturating_add(value.time)
}
