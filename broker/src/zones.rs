//! Zones: which availability zone (Kafka's rack) this broker, its peers and its clients are in,
//! where a consumer should read from (KIP-392's replica selector), and how many bytes cross a
//! zone boundary — the bytes a cloud bills.
//!
//! A client names its zone in one of two ways: a consumer's Fetch (v11+) carries `rack_id`
//! (librdkafka's and Java's `client.rack`); any client may put `strata_az=<zone>` in its
//! `client.id` (the convention AutoMQ and WarpStream read as `automq_az=` / `ws_az=`), which
//! is how a producer, which sends no rack, says where it is. The Fetch field wins when both are
//! set. A zone of more than [`MAX_ZONE_LEN`] bytes is not a zone: the client counts as
//! unknown and reads from leaders.
//!
//! Traffic is counted per batch of bytes (a fetch answer, a produce request, a replica fetch,
//! an object-store request), never per record, into fixed counters: no label lookup on the
//! hot path.
//!
//! Invariants (docs/invariants.md 16):
//! - the selector names only a replica that is in the ISR, whose broker is registered and not
//!   fenced, that has the fetch offset (its log end as the leader last saw it reaches it), and
//!   whose zone is the client's; the leader itself is never named (its answer carries records
//!   instead);
//! - a client whose zone is unknown is never redirected.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

pub use crate::config::Selector;
use crate::metrics::Metrics;

/// Longest zone name taken from a client (AWS's are ~10 bytes; Kafka sets no limit).
pub const MAX_ZONE_LEN: usize = 64;

/// The marker a client id carries its zone after.
const CLIENT_ID_ZONE: &str = "strata_az=";

/// A client's zone: the Fetch's `rack_id` if it names one, else `strata_az=<zone>` in its client
/// id (up to the next `,`, `;` or space). `None` when neither names a usable zone.
pub fn client_zone<'a>(rack_id: Option<&'a str>, client_id: &'a str) -> Option<&'a str> {
    let usable = |z: &str| !z.is_empty() && z.len() <= MAX_ZONE_LEN;
    if let Some(r) = rack_id.filter(|r| !r.is_empty()) {
        return usable(r).then_some(r);
    }
    let at = client_id.find(CLIENT_ID_ZONE)? + CLIENT_ID_ZONE.len();
    let rest = &client_id[at..];
    let end = rest
        .find(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|z| usable(z))
}

/// A replica a consumer might be sent to, as the leader sees it.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub broker: u64,
    pub zone: Option<&'a str>,
    /// In the ISR, registered and not fenced.
    pub available: bool,
    /// Its log end as the leader last saw it (-1: unknown).
    pub log_end: i64,
}

/// Kafka's rack-aware rule: a client in the leader's zone (or of no known zone) reads from the
/// leader; otherwise from the available replica of its zone that has `offset` and is furthest
/// ahead (ties to the lowest id, so a client is not bounced between equals). `None`: the
/// leader.
pub fn select<'a>(
    selector: Selector,
    client: Option<&str>,
    leader_zone: Option<&str>,
    offset: i64,
    candidates: impl IntoIterator<Item = Candidate<'a>>,
) -> Option<u64> {
    let client = client?;
    if selector == Selector::Leader || leader_zone == Some(client) {
        return None;
    }
    candidates
        .into_iter()
        .filter(|c| c.available && c.zone == Some(client) && c.log_end >= offset)
        .max_by_key(|c| (c.log_end, std::cmp::Reverse(c.broker)))
        .map(|c| c.broker)
}

/// Which way bytes go, seen from this broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    In = 0,
    Out = 1,
}

/// What the bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Produce = 0,
    Fetch = 1,
    Replication = 2,
    ObjectStore = 3,
}

/// Where the other end is, against this broker's zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossing {
    Same = 0,
    Cross = 1,
    /// This broker's zone or the peer's is not known.
    Unknown = 2,
    /// A regional service (the object store): no zone to cross. In-region S3 traffic is not
    /// billed per zone.
    Regional = 3,
}

/// The streams [`Zones::crossings`] sums: each zone crossing counted once, by the broker
/// that sent it or took it from a client.
const BILLED: [(Direction, Kind); 3] = [
    (Direction::Out, Kind::Replication),
    (Direction::In, Kind::Produce),
    (Direction::Out, Kind::Fetch),
];

const DIRECTIONS: [&str; 2] = ["in", "out"];
const KINDS: [&str; 4] = ["produce", "fetch", "replication", "object_store"];
const CROSSINGS: [&str; 4] = ["same", "cross", "unknown", "regional"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrafficLabels {
    direction: &'static str,
    kind: &'static str,
    zone: &'static str,
}

/// This broker's zone, its selector, and its traffic by zone.
pub struct Zones {
    zone: Option<String>,
    selector: Selector,
    /// By `[direction][kind][crossing]`, taken from the family once.
    counters: Vec<Counter>,
}

impl Zones {
    /// For a broker in `zone` with `selector`; its counters go on `/metrics` as
    /// `strata_zone_bytes_total{direction, kind, zone}`.
    pub fn new(zone: Option<String>, selector: Selector, metrics: &Metrics) -> Zones {
        let family = Family::<TrafficLabels, Counter>::default();
        let mut counters = Vec::with_capacity(DIRECTIONS.len() * KINDS.len() * CROSSINGS.len());
        for direction in DIRECTIONS {
            for kind in KINDS {
                for zone in CROSSINGS {
                    counters.push(
                        family
                            .get_or_create(&TrafficLabels {
                                direction,
                                kind,
                                zone,
                            })
                            .clone(),
                    );
                }
            }
        }
        let help = "Bytes this broker sent (out) and received (in), by kind (produce, fetch, replication, object_store) and by whether the other end is in this broker's zone (same), another (cross), unknown, or a regional service (regional)";
        metrics.register(|r| r.register("zone_bytes", help, family));
        // The console's charts read the streams `crossings` sums, same and cross, as
        // `strata_zone_billed_<kind>_<direction>_total{zone}` (clones of these counters).
        metrics.history().register(|r| {
            for crossing in [Crossing::Same, Crossing::Cross] {
                let r =
                    r.sub_registry_with_label(("zone".into(), CROSSINGS[crossing as usize].into()));
                for (d, k) in BILLED {
                    r.register(
                        format!(
                            "zone_billed_{}_{}",
                            KINDS[k as usize], DIRECTIONS[d as usize]
                        ),
                        help,
                        counters[at(d, k, crossing)].clone(),
                    );
                }
            }
        });
        Zones {
            zone: zone.filter(|z| !z.is_empty()),
            selector,
            counters,
        }
    }

    /// This broker's zone.
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    pub fn selector(&self) -> Selector {
        self.selector
    }

    /// Where a peer in `other` is against this broker.
    fn crossing(&self, other: Option<&str>) -> Crossing {
        match (self.zone.as_deref(), other) {
            (Some(a), Some(b)) if a == b => Crossing::Same,
            (Some(_), Some(_)) => Crossing::Cross,
            _ => Crossing::Unknown,
        }
    }

    /// Counts `bytes` going `direction` as `kind` to or from a peer in zone `peer` (`None`:
    /// a client that names none).
    pub fn count(&self, direction: Direction, kind: Kind, peer: Option<&str>, bytes: u64) {
        self.add(direction, kind, self.crossing(peer), bytes);
    }

    /// Counts `bytes` going `direction` as `kind` to or from a peer at `crossing`.
    fn add(&self, direction: Direction, kind: Kind, crossing: Crossing, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.counters[at(direction, kind, crossing)].inc_by(bytes);
    }

    /// Bytes counted so far for one label set.
    pub fn counted(&self, direction: Direction, kind: Kind, crossing: Crossing) -> u64 {
        self.counters[at(direction, kind, crossing)].get()
    }

    /// Bytes that stayed in this broker's zone and bytes that crossed into another, each
    /// crossing counted once by the broker that sent it or took it from a client: replication
    /// sent, produce requests taken, fetch answers sent. Summed over a cluster's brokers this
    /// is every broker-side zone crossing, what a cloud bills at its inter-zone rate in each
    /// direction. Bytes to or from a peer of unknown zone are in neither.
    pub fn crossings(&self) -> (u64, u64) {
        let sum = |c: Crossing| (BILLED.iter()).map(|(d, k)| self.counted(*d, *k, c)).sum();
        (sum(Crossing::Same), sum(Crossing::Cross))
    }

    /// The object store's running totals `(read, written)`, brought into the regional
    /// counters at each scrape (the store counts its own bytes, per request).
    pub fn follow_object_store(
        &self,
        metrics: &Metrics,
        totals: impl Fn() -> (u64, u64) + Send + Sync + 'static,
    ) {
        let read = self.counters[at(Direction::In, Kind::ObjectStore, Crossing::Regional)].clone();
        let written =
            self.counters[at(Direction::Out, Kind::ObjectStore, Crossing::Regional)].clone();
        metrics.on_scrape(move || {
            let (r, w) = totals();
            for (counter, total) in [(&read, r), (&written, w)] {
                counter.inc_by(total.saturating_sub(counter.get()));
            }
        });
    }
}

/// Where one label set's counter is in [`Zones::counters`].
fn at(direction: Direction, kind: Kind, crossing: Crossing) -> usize {
    (direction as usize * KINDS.len() + kind as usize) * CROSSINGS.len() + crossing as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_zone_comes_from_the_fetch_or_the_client_id() {
        assert_eq!(client_zone(Some("az1"), "strata_az=az2"), Some("az1"));
        assert_eq!(client_zone(Some(""), "app,strata_az=az2,x"), Some("az2"));
        assert_eq!(client_zone(None, "strata_az=az3"), Some("az3"));
        assert_eq!(client_zone(None, "my-app strata_az=az3"), Some("az3"));
        assert_eq!(client_zone(None, "my-app"), None);
        assert_eq!(client_zone(None, "strata_az="), None);
        let long = "z".repeat(MAX_ZONE_LEN + 1);
        assert_eq!(client_zone(Some(&long), "strata_az=az2"), None);
        assert_eq!(client_zone(None, &format!("strata_az={long}")), None);
    }

    fn c(broker: u64, zone: &str, available: bool, log_end: i64) -> Candidate<'_> {
        Candidate {
            broker,
            zone: Some(zone),
            available,
            log_end,
        }
    }

    #[test]
    fn the_selector_names_an_available_replica_of_the_clients_zone_that_has_the_offset() {
        let rack = Selector::RackAware;
        let all = [c(2, "b", true, 100), c(3, "c", true, 90)];
        // In the leader's zone, of no zone, or with leaders selected: the leader.
        assert_eq!(select(rack, Some("a"), Some("a"), 50, all), None);
        assert_eq!(select(rack, None, Some("a"), 50, all), None);
        assert_eq!(
            select(Selector::Leader, Some("b"), Some("a"), 50, all),
            None
        );
        assert_eq!(select(rack, Some("b"), Some("a"), 50, all), Some(2));
        assert_eq!(select(rack, Some("c"), Some("a"), 50, all), Some(3));
        // Not yet at the offset, out of the ISR or fenced: the leader.
        assert_eq!(select(rack, Some("c"), Some("a"), 95, all), None);
        assert_eq!(
            select(rack, Some("b"), Some("a"), 50, [c(2, "b", false, 100)]),
            None
        );
        // The one furthest ahead, then the lowest id.
        let two = [
            c(4, "b", true, 80),
            c(2, "b", true, 100),
            c(5, "b", true, 100),
        ];
        assert_eq!(select(rack, Some("b"), Some("a"), 50, two), Some(2));
        // A broker of no zone is never a match; a leader of no zone still sends clients away.
        assert_eq!(select(rack, Some("b"), None, 50, all), Some(2));
    }

    #[test]
    fn traffic_is_counted_by_direction_kind_and_crossing() {
        let metrics = Metrics::new();
        let z = Zones::new(Some("a".into()), Selector::Leader, &metrics);
        assert_eq!(z.crossing(Some("a")), Crossing::Same);
        assert_eq!(z.crossing(Some("b")), Crossing::Cross);
        assert_eq!(z.crossing(None), Crossing::Unknown);
        z.add(Direction::Out, Kind::Fetch, Crossing::Cross, 10);
        z.add(Direction::Out, Kind::Fetch, Crossing::Cross, 5);
        z.add(Direction::In, Kind::ObjectStore, Crossing::Regional, 7);
        assert_eq!(z.counted(Direction::Out, Kind::Fetch, Crossing::Cross), 15);
        assert_eq!(z.counted(Direction::In, Kind::Fetch, Crossing::Cross), 0);
        assert_eq!(
            z.counted(Direction::In, Kind::ObjectStore, Crossing::Regional),
            7
        );
        // Crossings: replication out, produce in, fetch out; each once.
        z.add(Direction::In, Kind::Replication, Crossing::Cross, 100);
        z.add(Direction::Out, Kind::Replication, Crossing::Cross, 3);
        z.add(Direction::In, Kind::Produce, Crossing::Same, 20);
        z.add(Direction::In, Kind::Produce, Crossing::Unknown, 1000);
        assert_eq!(z.crossings(), (20, 15 + 3));
        let text = metrics.render();
        assert!(text.contains(
            "strata_zone_bytes_total{direction=\"out\",kind=\"fetch\",zone=\"cross\"} 15"
        ));
    }
}
