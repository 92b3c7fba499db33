//! The outcomes of `contract.json` (`outcomes`): every request ends in one, which is counted
//! (per [`crate::Pool`], read with [`Outcomes::counts`]) and reported as a `tracing` event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::contract::contract;

/// The count of each outcome since the pool was made. Cheap to clone (shared counters).
#[derive(Clone)]
pub struct Outcomes {
    counts: Arc<Vec<AtomicU64>>,
}

impl Default for Outcomes {
    fn default() -> Self {
        let counts = contract().outcomes.iter().map(|_| AtomicU64::new(0));
        Outcomes {
            counts: Arc::new(counts.collect()),
        }
    }
}

impl Outcomes {
    /// Every outcome name of the contract with its count, in the contract's order.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        contract()
            .outcomes
            .iter()
            .zip(self.counts.iter())
            .map(|(name, n)| (name.as_str(), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// The count of one outcome (0 for a name the contract does not have).
    pub fn get(&self, name: &str) -> u64 {
        self.counts()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, count)| count)
    }

    /// Counts `name` and reports it in the current span (the request's); `detail` says why.
    pub(crate) fn record(&self, name: &'static str, detail: &str) {
        let Some(at) = contract().outcomes.iter().position(|n| n == name) else {
            // a misspelt name is a bug in this crate, caught by the unit tests
            debug_assert!(false, "unknown outcome {name}");
            return;
        };
        self.counts[at].fetch_add(1, Ordering::Relaxed);
        match name {
            // the handler ended the claim's transaction, or the database failed: someone must look
            "transaction_ended" | "database_error" => {
                tracing::error!(target: "pg_idem_http", outcome = name, "{detail}")
            }
            _ => tracing::info!(target: "pg_idem_http", outcome = name, "{detail}"),
        }
    }
}
