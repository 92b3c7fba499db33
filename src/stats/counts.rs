//! The counters as SQL shows them: `Counts` has one field per counter column of
//! idem_counters(), idem_tenant_counters(), idem_stats() and idem_tenant_stats(), named as the
//! column, each NULL (None) where there are no counters (pg_idem not preloaded); `Totals` are
//! this server's counters in total. Values only: no shared memory, no SQL.

use serde::{Deserialize, Serialize};

use super::counters::{self, Event, EventCounts};
use crate::pg::time::Micros;

/// The event counters of a server, a tenant or a cluster. `Default` is NULL everywhere: no
/// counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "CountsInJson", into = "CountsInJson")]
pub struct Counts {
    pub claims: Option<i64>,
    pub replays_completed: Option<i64>,
    pub replays_failed: Option<i64>,
    pub in_progress: Option<i64>,
    pub mismatches: Option<i64>,
    pub takeovers: Option<i64>,
    pub stale_fences: Option<i64>,
    pub stale_keys: Option<i64>,
    pub consumed: Option<i64>,
    pub consume_duplicates: Option<i64>,
}

/// A shared-memory count as SQL's bigint (it cannot realistically pass i64::MAX; if it did, it
/// would stop there rather than turn negative).
fn counter(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Adds a node's value to a total; a node without counters (NULL) adds nothing.
pub fn add(total: &mut Option<i64>, value: Option<i64>) {
    if let Some(v) = value {
        *total = Some(total.unwrap_or(0).saturating_add(v));
    }
}

impl Counts {
    /// The counts of events read from shared memory (none of them NULL).
    pub fn of(events: &EventCounts) -> Counts {
        let count = |event| Some(counter(events.get(event)));
        Counts {
            claims: count(Event::Claimed),
            replays_completed: count(Event::ReplayCompleted),
            replays_failed: count(Event::ReplayFailed),
            in_progress: count(Event::InProgress),
            mismatches: count(Event::Mismatch),
            takeovers: count(Event::Takeover),
            stale_fences: count(Event::StaleFence),
            stale_keys: count(Event::StaleKey),
            consumed: count(Event::Consumed),
            consume_duplicates: count(Event::ConsumeDuplicate),
        }
    }

    /// Adds another node's counts to these; its NULLs add nothing.
    pub fn add(&mut self, other: &Counts) {
        // destructured, so that a new counter cannot be forgotten here
        let Counts {
            claims,
            replays_completed,
            replays_failed,
            in_progress,
            mismatches,
            takeovers,
            stale_fences,
            stale_keys,
            consumed,
            consume_duplicates,
        } = *other;
        add(&mut self.claims, claims);
        add(&mut self.replays_completed, replays_completed);
        add(&mut self.replays_failed, replays_failed);
        add(&mut self.in_progress, in_progress);
        add(&mut self.mismatches, mismatches);
        add(&mut self.takeovers, takeovers);
        add(&mut self.stale_fences, stale_fences);
        add(&mut self.stale_keys, stale_keys);
        add(&mut self.consumed, consumed);
        add(&mut self.consume_duplicates, consume_duplicates);
    }

    /// Replays of either outcome, as idem_tenant_stats() shows them; NULL when both are.
    pub fn replays(&self) -> Option<i64> {
        match (self.replays_completed, self.replays_failed) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        }
    }
}

/// How `Counts` travel as JSON between the nodes of a cluster (inside `idem.node_statistics()`):
/// an array in the order of idem_counters()'s columns, the form it had before `Counts` had
/// names, so that nodes upgraded one at a time still read each other. The only place where the
/// order matters; the unit test below pins it.
type CountsInJson = [Option<i64>; 10];

impl From<CountsInJson> for Counts {
    fn from(json: CountsInJson) -> Counts {
        let [claims, replays_completed, replays_failed, in_progress, mismatches, takeovers, stale_fences, stale_keys, consumed, consume_duplicates] =
            json;
        Counts {
            claims,
            replays_completed,
            replays_failed,
            in_progress,
            mismatches,
            takeovers,
            stale_fences,
            stale_keys,
            consumed,
            consume_duplicates,
        }
    }
}

impl From<Counts> for CountsInJson {
    fn from(counts: Counts) -> CountsInJson {
        let Counts {
            claims,
            replays_completed,
            replays_failed,
            in_progress,
            mismatches,
            takeovers,
            stale_fences,
            stale_keys,
            consumed,
            consume_duplicates,
        } = counts;
        [
            claims,
            replays_completed,
            replays_failed,
            in_progress,
            mismatches,
            takeovers,
            stale_fences,
            stale_keys,
            consumed,
            consume_duplicates,
        ]
    }
}

/// This server's counters in total, and since when they count: its start or crash restart, or
/// the last reset (TimestampTz). All NULL without the preload.
pub struct Totals {
    pub counts: Counts,
    pub purged: Option<i64>,
    pub since: Option<Micros>,
}

impl Totals {
    pub fn local() -> Totals {
        match counters::snapshot() {
            Some(snapshot) => Totals {
                counts: Counts::of(&snapshot.events),
                purged: Some(counter(snapshot.purged)),
                since: Some(snapshot.reset_at),
            },
            None => Totals {
                counts: Counts::default(),
                purged: None,
                since: None,
            },
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    /// What a node of any pg_idem version sends and reads: changing it splits a cluster whose
    /// nodes are upgraded one by one.
    #[test]
    fn counts_travel_as_an_array_in_column_order() {
        let counts = Counts {
            claims: Some(1),
            replays_completed: Some(2),
            replays_failed: Some(3),
            in_progress: Some(4),
            mismatches: Some(5),
            takeovers: Some(6),
            stale_fences: Some(7),
            stale_keys: Some(8),
            consumed: Some(9),
            consume_duplicates: None,
        };
        let json = serde_json::to_string(&counts).unwrap();
        assert_eq!(json, "[1,2,3,4,5,6,7,8,9,null]");
        assert_eq!(serde_json::from_str::<Counts>(&json).unwrap(), counts);
        assert!(serde_json::from_str::<Counts>("[1,2,3]").is_err());
    }

    #[test]
    fn adding_null_counts_adds_nothing() {
        let mut total = Counts::default();
        total.add(&Counts::default());
        assert_eq!(total, Counts::default());
        total.add(&Counts {
            claims: Some(2),
            ..Counts::default()
        });
        total.add(&Counts {
            claims: Some(3),
            takeovers: Some(1),
            ..Counts::default()
        });
        assert_eq!(
            total,
            Counts {
                claims: Some(5),
                takeovers: Some(1),
                ..Counts::default()
            }
        );
        assert_eq!(total.replays(), None);
    }
}
