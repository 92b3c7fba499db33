//! Times as PostgreSQL's timestamptz holds them: microseconds since 2000-01-01 UTC.

pub type Micros = i64;

/// `at` plus a duration in microseconds: the one way pg_idem adds a lease or a ttl to a time.
/// It saturates rather than fail: leases and ttls are at most 100 years, so only an `at` near
/// the end of time could reach the bound.
pub fn after(at: Micros, duration_us: i64) -> Micros {
    at.saturating_add(duration_us)
}
