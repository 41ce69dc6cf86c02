//! DescribeConfigs: a topic's configs (its overrides, else the broker settings that hold
//! their defaults), a broker's settings under Kafka's names with where each value comes from
//! (dynamic for this broker, dynamic cluster-wide, the static file, the default) and the
//! values it would have without the winning one (synonyms), and the broker's loggers.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use strata_metadata::ClusterState;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::config::catalogue::{self, Kind, Setting};
use crate::config::BrokerConfig;
use crate::dynamic_config;
use crate::error::ErrorCode;
use crate::group::config::{self as group_config, InForce};
use crate::security::Access;
use crate::topic_config;
use strata_metadata::acl::AclOperation;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
/// KIP-848's group config resource.
pub const RESOURCE_GROUP: i8 = 32;

const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_DYNAMIC_BROKER_LOGGER: i8 = 6;
const SOURCE_GROUP: i8 = 8;

/// One value of a config and where it comes from; the first of a config's layers is the one
/// in force, the others are its synonyms.
struct Layer {
    name: String,
    value: Option<String>,
    source: i8,
}

/// What every answer of one request needs to know of the broker's settings, read once.
struct Settings<'a> {
    state: &'a ClusterState,
    own: String,
    base: &'a BrokerConfig,
    base_values: BTreeMap<&'static str, Option<String>>,
    defaults: BTreeMap<&'static str, Option<String>>,
}

impl<'a> Settings<'a> {
    fn new(broker: &'a Broker, state: &'a ClusterState) -> Settings<'a> {
        let base = &broker.node.config;
        // The defaults of this node's shape (one of them depends on whether it has voters).
        let shape = BrokerConfig {
            voters: base.voters.clone(),
            ..BrokerConfig::default()
        };
        Settings {
            state,
            own: base.node_id.to_string(),
            base,
            base_values: catalogue::values(base),
            defaults: catalogue::values(&shape),
        }
    }

    /// A broker setting's layers, winner first: this broker's dynamic value, the cluster-wide
    /// one, the file's (or environment's, or a flag's), the default.
    fn layers(&self, s: &'static Setting) -> Vec<Layer> {
        // Under its own name, then under Kafka's synonyms in other units (which it beats).
        let names: Vec<&str> = std::iter::once(s.name)
            .chain(dynamic_config::synonyms_of(s.name))
            .collect();
        let stored = |resource: &str, source| {
            let configs = self.state.broker_config(resource);
            (names.iter()).filter_map(move |n| {
                configs.and_then(|c| c.get(*n)).map(|v| Layer {
                    name: n.to_string(),
                    value: Some(v.clone()),
                    source,
                })
            })
        };
        let mut layers: Vec<Layer> = (stored(&self.own, SOURCE_DYNAMIC_BROKER))
            .chain(stored("", SOURCE_DYNAMIC_DEFAULT_BROKER))
            .collect();
        if self.base.static_keys.contains(s.key) {
            layers.push(Layer {
                name: s.name.to_string(),
                value: self.base_values[s.key].clone(),
                source: SOURCE_STATIC_BROKER,
            });
        }
        layers.push(Layer {
            name: s.name.to_string(),
            value: self.defaults[s.key].clone(),
            source: SOURCE_DEFAULT,
        });
        layers
    }
}

impl Settings<'_> {
    /// The names stored for a broker resource that no setting holds (see
    /// [`dynamic_config::Name`]), each with its layers, winner first: this broker's own
    /// (when `own`) then the cluster-wide one.
    fn inert(&self, own: bool) -> BTreeMap<String, Vec<Layer>> {
        let mut names: BTreeMap<String, Vec<Layer>> = BTreeMap::new();
        let resources = [
            (own.then_some(self.own.as_str()), SOURCE_DYNAMIC_BROKER),
            (Some(""), SOURCE_DYNAMIC_DEFAULT_BROKER),
        ];
        for (resource, source) in resources {
            let Some(stored) = resource.and_then(|r| self.state.broker_config(r)) else {
                continue;
            };
            for (name, value) in stored {
                if dynamic_config::name(name).is_ok_and(|n| n.stored_only()) {
                    names.entry(name.clone()).or_default().push(Layer {
                        name: name.clone(),
                        value: Some(value.clone()),
                        source,
                    });
                }
            }
        }
        names
    }
}

/// The source of the layer in force.
fn in_force(layers: &[Layer]) -> i8 {
    layers.first().map_or(SOURCE_DEFAULT, |l| l.source)
}

pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeConfigsRequest,
    version: i16,
    access: &Access,
) -> DescribeConfigsResponse {
    let state = broker.node.metadata.state();
    let settings = Settings::new(broker, &state);
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let wanted = |name: &str| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            // One answer, with its synonyms (v1+, when asked for); a password's value is never
            // shown.
            let entry = |name: &str,
                         value: Option<String>,
                         source: i8,
                         synonyms: Vec<Layer>,
                         read_only: bool,
                         kind: Kind,
                         doc: &str| {
                let sensitive = kind == Kind::Password;
                let hide = |v: Option<String>| if sensitive { None } else { v };
                let mut e = DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(name))
                    .with_value(hide(value).map(str_bytes))
                    .with_read_only(read_only)
                    .with_is_sensitive(sensitive)
                    .with_config_source(source);
                if req.include_synonyms {
                    e = e.with_synonyms(
                        (synonyms.into_iter())
                            .map(|l| {
                                DescribeConfigsSynonym::default()
                                    .with_name(str_bytes(l.name))
                                    .with_value(hide(l.value).map(str_bytes))
                                    .with_source(l.source)
                            })
                            .collect(),
                    );
                }
                if version >= 3 {
                    e = e.with_config_type(kind.code());
                    if req.include_documentation {
                        e = e.with_documentation(Some(str_bytes(doc)));
                    }
                }
                e
            };
            let denied = match r.resource_type {
                RESOURCE_TOPIC => (!access.topic(AclOperation::DescribeConfigs, &r.resource_name))
                    .then_some(ErrorCode::TopicAuthorizationFailed),
                RESOURCE_GROUP => (!access.group(AclOperation::DescribeConfigs, &r.resource_name))
                    .then_some(ErrorCode::GroupAuthorizationFailed),
                RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => (!access
                    .cluster(AclOperation::DescribeConfigs))
                .then_some(ErrorCode::ClusterAuthorizationFailed),
                _ => None,
            };
            if let Some(code) = denied {
                return result
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes("DESCRIBE_CONFIGS is not authorized")));
            }
            let name = r.resource_name.as_str();
            let this_broker = || {
                (name != settings.own).then(|| {
                    result
                        .clone()
                        .with_error_code(ErrorCode::InvalidRequest.code())
                        .with_error_message(Some(str_bytes(format!(
                            "this is broker {}; ask broker '{name}' for its configs",
                            settings.own
                        ))))
                })
            };
            match r.resource_type {
                RESOURCE_TOPIC => match state.topic(name) {
                    None => result
                        .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(format!("unknown topic '{name}'")))),
                    Some(t) => {
                        let configs = topic_config::effective(&broker.node.settings(), &t.configs)
                            .into_iter()
                            .filter(|(k, _)| wanted(k))
                            .map(|(k, (v, _))| {
                                let def =
                                    topic_config::key(&k).expect("effective lists known keys");
                                let mut layers: Vec<Layer> = (t.configs.get(&k))
                                    .map(|v| Layer {
                                        name: def.name.to_string(),
                                        value: Some(v.clone()),
                                        source: SOURCE_DYNAMIC_TOPIC,
                                    })
                                    .into_iter()
                                    .collect();
                                match topic_config::broker_setting(def.name).and_then(|key| {
                                    catalogue::SETTINGS.iter().find(|s| s.key == key)
                                }) {
                                    Some(s) => layers.extend(settings.layers(s)),
                                    None => layers.push(Layer {
                                        name: def.name.to_string(),
                                        value: Some(v.clone()),
                                        source: SOURCE_DEFAULT,
                                    }),
                                }
                                let source = in_force(&layers);
                                entry(&k, Some(v), source, layers, false, def.kind, def.doc)
                            })
                            .collect();
                        result.with_configs(configs)
                    }
                },
                // The cluster-wide resource holds only what was set dynamically for it.
                RESOURCE_BROKER if name.is_empty() => {
                    let stored = state.broker_config("").cloned().unwrap_or_default();
                    let mut stored_only = settings.inert(false);
                    let configs = (stored.into_iter())
                        .filter(|(k, _)| wanted(k))
                        .filter_map(|(k, v)| {
                            if let Some(layers) = stored_only.remove(&k) {
                                let (kind, doc) = inert(&k);
                                let source = SOURCE_DYNAMIC_DEFAULT_BROKER;
                                return Some(entry(&k, Some(v), source, layers, false, kind, doc));
                            }
                            let s = catalogue::by_name(&k)
                                .or_else(|| dynamic_config::synonym_setting(&k))?;
                            let layers = settings.layers(s);
                            let layers = layers
                                .into_iter()
                                .filter(|l| l.source != SOURCE_DYNAMIC_BROKER)
                                .collect();
                            let source = SOURCE_DYNAMIC_DEFAULT_BROKER;
                            Some(entry(
                                s.name,
                                Some(v),
                                source,
                                layers,
                                !s.dynamic,
                                s.kind,
                                s.doc,
                            ))
                        })
                        .collect();
                    result.with_configs(configs)
                }
                RESOURCE_BROKER => {
                    if let Some(refused) = this_broker() {
                        return refused;
                    }
                    let values = catalogue::values(&broker.node.settings());
                    let mut configs: Vec<_> = (catalogue::SETTINGS.iter())
                        .filter(|s| wanted(s.name))
                        .map(|s| {
                            let (value, layers) = (values[s.key].clone(), settings.layers(s));
                            let source = in_force(&layers);
                            entry(s.name, value, source, layers, !s.dynamic, s.kind, s.doc)
                        })
                        .collect();
                    configs.extend(
                        (settings.inert(true).into_iter())
                            .filter(|(k, _)| wanted(k))
                            .map(|(k, layers)| {
                                let (value, source) = (layers[0].value.clone(), layers[0].source);
                                let (kind, doc) = inert(&k);
                                entry(&k, value, source, layers, false, kind, doc)
                            }),
                    );
                    result.with_configs(configs)
                }
                RESOURCE_BROKER_LOGGER => {
                    if let Some(refused) = this_broker() {
                        return refused;
                    }
                    let configs = (broker.loggers.list().into_iter())
                        .filter(|(logger, _)| wanted(logger))
                        .map(|(logger, level)| {
                            entry(
                                &logger,
                                Some(level.to_string()),
                                SOURCE_DYNAMIC_BROKER_LOGGER,
                                Vec::new(),
                                false,
                                Kind::Str,
                                "log level of this logger (a module path; root: every other)",
                            )
                        })
                        .collect();
                    result.with_configs(configs)
                }
                // Every group config, set or not: a group need not exist for its configs.
                RESOURCE_GROUP => {
                    let in_force = InForce {
                        broker: &broker.node.config,
                        overrides: state.group_config(name),
                    };
                    let configs = (group_config::GROUP_CONFIGS.iter())
                        .filter(|c| wanted(c.name))
                        .map(|c| {
                            let (value, set) = in_force.get(c);
                            let source = if set { SOURCE_GROUP } else { SOURCE_DEFAULT };
                            let layer = Layer {
                                name: c.name.to_string(),
                                value: Some(value.clone()),
                                source,
                            };
                            entry(
                                c.name,
                                Some(value),
                                source,
                                vec![layer],
                                false,
                                c.kind,
                                c.doc,
                            )
                        })
                        .collect();
                    result.with_configs(configs)
                }
                other => result
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "resource type {other} is not supported"
                    )))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// The type and documentation of a name stored only: Kafka's type, or a string for a name
/// Kafka does not know.
fn inert(name: &str) -> (Kind, &'static str) {
    match dynamic_config::name(name) {
        Ok(n) => (n.kind().unwrap_or(Kind::Str), n.doc()),
        Err(_) => (Kind::Str, ""),
    }
}
