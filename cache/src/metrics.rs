//! Block lookups by class and tier, store traffic and prefetch outcomes, for `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::config::ReadClass;

/// Where a lookup found its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Memory,
    Disk,
}

/// How a lookup ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Hit(Tier),
    /// Not cached; this lookup's GET filled it.
    Fetched,
    /// Not cached; another lookup's GET, already in flight, filled it.
    Joined,
}

impl Outcome {
    fn tier(self) -> &'static str {
        match self {
            Outcome::Hit(Tier::Memory) => "memory",
            Outcome::Hit(Tier::Disk) => "disk",
            Outcome::Fetched | Outcome::Joined => "miss",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    class: &'static str,
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    class: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrefetchLabels {
    class: &'static str,
    outcome: &'static str,
}

/// Counters of one [`crate::BlockCache`]; register them with [`CacheMetrics::register`].
///
/// Reads and prefetches are counted apart: `block_lookups` is what readers saw, so its hit
/// ratio is not diluted by the prefetches that made those hits.
#[derive(Default)]
pub struct CacheMetrics {
    lookups: Family<LookupLabels, Counter>,
    joined: Family<ClassLabels, Counter>,
    object_lookups: Family<TierLabels, Counter>,
    fetched_bytes: Family<ClassLabels, Counter>,
    fetch_errors: Family<ErrorLabels, Counter>,
    prefetch: Family<PrefetchLabels, Counter>,
    gets_in_flight: Gauge,
    // Kept apart from the families so tests read them without building labels.
    prefetch_done: Counter<u64, AtomicU64>,
}

impl CacheMetrics {
    /// Adds the metrics under `cache_*` to `registry` (`strata_cache_*` in the broker's).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("cache");
        r.register(
            "block_lookups",
            "Block reads by class (recent, replay) and where the block was: memory, disk, or \
             miss (fetched from the object store)",
            self.lookups.clone(),
        );
        r.register(
            "joined_fetches",
            "Block misses that waited on a GET another reader already had in flight, by class",
            self.joined.clone(),
        );
        r.register(
            "object_lookups",
            "Whole-object reads (segment indexes) by tier: memory, disk or miss",
            self.object_lookups.clone(),
        );
        r.register(
            "fetched_bytes",
            "Bytes fetched from the object store into the cache, by class",
            self.fetched_bytes.clone(),
        );
        r.register(
            "fetch_errors",
            "Failed block or object fetches, by class and kind (not_found, unavailable, \
             truncated, ...)",
            self.fetch_errors.clone(),
        );
        r.register(
            "prefetch_blocks",
            "Blocks considered by read-ahead, by class and outcome: cached (skipped), disk \
             (loaded into memory), fetched, joined (already in flight), failed",
            self.prefetch.clone(),
        );
        r.register(
            "gets_in_flight",
            "Object store GETs issued by the cache and not yet answered",
            self.gets_in_flight.clone(),
        );
    }

    pub(crate) fn lookup(&self, class: ReadClass, outcome: Outcome) {
        let class = class.label();
        self.lookups
            .get_or_create(&LookupLabels {
                class,
                tier: outcome.tier(),
            })
            .inc();
        if outcome == Outcome::Joined {
            self.joined.get_or_create(&ClassLabels { class }).inc();
        }
    }

    pub(crate) fn object_lookup(&self, outcome: Outcome) {
        self.object_lookups
            .get_or_create(&TierLabels {
                tier: outcome.tier(),
            })
            .inc();
    }

    pub(crate) fn fetched(&self, class: ReadClass, bytes: u64) {
        self.fetched_bytes
            .get_or_create(&ClassLabels {
                class: class.label(),
            })
            .inc_by(bytes);
    }

    pub(crate) fn fetch_error(&self, class: ReadClass, kind: &'static str) {
        self.fetch_errors
            .get_or_create(&ErrorLabels {
                class: class.label(),
                kind,
            })
            .inc();
    }

    pub(crate) fn prefetch_skipped(&self, class: ReadClass) {
        self.prefetch_outcome(class, "cached");
        self.prefetch_done.inc();
    }

    /// `None`: the lookup failed.
    pub(crate) fn prefetched(&self, class: ReadClass, outcome: Option<Outcome>) {
        let label = match outcome {
            Some(Outcome::Hit(Tier::Memory)) => "cached",
            Some(Outcome::Hit(Tier::Disk)) => "disk",
            Some(Outcome::Fetched) => "fetched",
            Some(Outcome::Joined) => "joined",
            None => "failed",
        };
        self.prefetch_outcome(class, label);
        self.prefetch_done.inc();
    }

    fn prefetch_outcome(&self, class: ReadClass, outcome: &'static str) {
        self.prefetch
            .get_or_create(&PrefetchLabels {
                class: class.label(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn get_started(&self) {
        self.gets_in_flight.inc();
    }

    pub(crate) fn get_finished(&self) {
        self.gets_in_flight.dec();
    }

    /// Block reads of `class` found in `tier`.
    pub fn hits(&self, class: ReadClass, tier: Tier) -> u64 {
        self.lookup_count(class, Outcome::Hit(tier))
    }

    /// Block reads of `class` that were not cached (their own GET or one already in flight).
    pub fn misses(&self, class: ReadClass) -> u64 {
        self.lookup_count(class, Outcome::Fetched)
    }

    /// Block misses of `class` that waited on another reader's GET instead of issuing one.
    pub fn joined(&self, class: ReadClass) -> u64 {
        self.joined
            .get_or_create(&ClassLabels {
                class: class.label(),
            })
            .get()
    }

    /// Whole-object reads served from memory.
    pub fn object_hits(&self) -> u64 {
        self.object_lookups
            .get_or_create(&TierLabels { tier: "memory" })
            .get()
    }

    pub fn fetched_bytes(&self, class: ReadClass) -> u64 {
        self.fetched_bytes
            .get_or_create(&ClassLabels {
                class: class.label(),
            })
            .get()
    }

    /// Failed fetches of `class` of `kind` (`truncated`, `not_found`, ...).
    pub fn fetch_errors(&self, class: ReadClass, kind: &'static str) -> u64 {
        self.fetch_errors
            .get_or_create(&ErrorLabels {
                class: class.label(),
                kind,
            })
            .get()
    }

    /// Blocks of `class` for which read-ahead issued a GET.
    pub fn prefetch_fetched(&self, class: ReadClass) -> u64 {
        self.prefetch
            .get_or_create(&PrefetchLabels {
                class: class.label(),
                outcome: "fetched",
            })
            .get()
    }

    /// Blocks read-ahead has finished with, whatever the outcome (for waiting on it in tests).
    pub fn prefetch_done(&self) -> u64 {
        self.prefetch_done.get()
    }

    fn lookup_count(&self, class: ReadClass, outcome: Outcome) -> u64 {
        self.lookups
            .get_or_create(&LookupLabels {
                class: class.label(),
                tier: outcome.tier(),
            })
            .get()
    }
}
