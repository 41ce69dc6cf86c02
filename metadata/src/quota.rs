//! Client quotas as the quorum stores them: Kafka's quota entities (KIP-13 client ids, KIP-55
//! users, each named or the default) and the three quotas a broker enforces on them. The broker
//! resolves a connection's quotas with them (`broker::quota`); AlterClientQuotas changes them
//! and DescribeClientQuotas lists them.
//!
//! Invariants:
//! - an entity names a user, a client id or both, each either one name or the default
//!   (Kafka's `<default>`, null on the wire); an entity with neither is never stored;
//! - a stored quota is finite and positive, and a byte rate is whole (Kafka types them LONG);
//! - an entity whose last quota is removed is gone, so the stored map only holds quotas.

use serde::{Deserialize, Serialize};

/// One side of an entity: a name, or the default that applies to every name without its own.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// From the wire: null is the default.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// What a quota applies to: `user` and/or `client_id`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    /// The entity types' names on the wire.
    pub const USER: &'static str = "user";
    pub const CLIENT_ID: &'static str = "client-id";
}

/// The quotas a broker enforces, by Kafka's names.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKey {
    /// Bytes per second a client may produce (request bytes), per broker.
    ProducerByteRate,
    /// Bytes per second a client may fetch (response bytes), per broker.
    ConsumerByteRate,
    /// Percentage of one handling thread's time the client's requests may take, per broker
    /// (200 = two threads' worth).
    RequestPercentage,
}

impl QuotaKey {
    pub const ALL: [QuotaKey; 3] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
        }
    }

    pub fn from_name(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Why `value` cannot be this quota, if it cannot.
    pub fn invalid(self, value: f64) -> Option<String> {
        if !value.is_finite() || value <= 0.0 {
            return Some(format!("{} must be positive, not {value}", self.name()));
        }
        if self != QuotaKey::RequestPercentage && value.fract() != 0.0 {
            return Some(format!(
                "{} is a whole number of bytes per second, not {value}",
                self.name()
            ));
        }
        None
    }
}

/// One entity's change: quotas set (replacing earlier values) and quotas removed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct QuotaAlteration {
    pub entity: QuotaEntity,
    pub set: Vec<(QuotaKey, f64)>,
    pub remove: Vec<QuotaKey>,
}

impl QuotaAlteration {
    /// Why this alteration cannot be applied, if it cannot.
    pub fn invalid(&self) -> Option<String> {
        if self.entity.user.is_none() && self.entity.client_id.is_none() {
            return Some("a quota entity names a user, a client id or both".into());
        }
        if let Some(why) = self.set.iter().find_map(|(k, v)| k.invalid(*v)) {
            return Some(why);
        }
        self.set
            .iter()
            .find(|(k, _)| self.remove.contains(k))
            .map(|(k, _)| format!("{} is both set and removed", k.name()))
    }
}

/// The stored quotas as a list of (entity, quotas) pairs: JSON map keys must be strings, and
/// an entity is a struct.
pub(crate) mod entries {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, K: Serialize, V: Serialize>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}
