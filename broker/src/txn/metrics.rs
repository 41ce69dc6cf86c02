//! Metrics of the transaction coordinator and of the markers this broker writes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MarkerLabels {
    result: &'static str,
    written: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

pub struct TxnMetrics {
    completed: Family<ResultLabels, Counter>,
    completion_seconds: Histogram,
    timed_out: Counter,
    markers: Family<MarkerLabels, Counter>,
    transactions: Family<StateLabels, Gauge>,
    oldest_open_seconds: Gauge,
}

impl Default for TxnMetrics {
    fn default() -> Self {
        TxnMetrics {
            completed: Family::default(),
            // 1 ms .. ~65 s
            completion_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            timed_out: Counter::default(),
            markers: Family::default(),
            transactions: Family::default(),
            oldest_open_seconds: Gauge::default(),
        }
    }
}

fn result(commit: bool) -> &'static str {
    if commit {
        "commit"
    } else {
        "abort"
    }
}

impl TxnMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("txn");
        r.register(
            "completed",
            "Transactions completed by this coordinator, by result (commit, abort)",
            self.completed.clone(),
        );
        r.register(
            "completion_seconds",
            "From a transaction's prepare to its completion: the markers' round",
            self.completion_seconds.clone(),
        );
        r.register(
            "timed_out",
            "Transactions this coordinator aborted for outliving transaction.timeout.ms",
            self.timed_out.clone(),
        );
        r.register(
            "markers",
            "Transaction markers this broker wrote as a partition leader, by result and whether the ISR took them",
            self.markers.clone(),
        );
        r.register(
            "transactions",
            "Transactional ids coordinated here, by state",
            self.transactions.clone(),
        );
        r.register(
            "oldest_open_seconds",
            "Age of the oldest ongoing transaction coordinated here (0: none)",
            self.oldest_open_seconds.clone(),
        );
    }

    pub fn completed(&self, commit: bool, seconds: f64) {
        self.completed
            .get_or_create(&ResultLabels {
                result: result(commit),
            })
            .inc();
        self.completion_seconds.observe(seconds);
    }

    pub fn timed_out(&self) {
        self.timed_out.inc();
    }

    pub fn marker(&self, commit: bool, written: bool) {
        self.markers
            .get_or_create(&MarkerLabels {
                result: result(commit),
                written: if written { "yes" } else { "no" },
            })
            .inc();
    }

    /// Sets the per-state counts and the oldest open transaction's age.
    pub fn set_states(&self, counts: &[(&'static str, i64)], oldest_open_seconds: i64) {
        for (state, n) in counts {
            self.transactions
                .get_or_create(&StateLabels { state })
                .set(*n);
        }
        self.oldest_open_seconds.set(oldest_open_seconds);
    }
}
