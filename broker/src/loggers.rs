//! Log levels changed at run time, as Kafka's BROKER_LOGGER resource changes log4j's: each
//! logger is a `tracing` target — a module path such as `strata_broker::replication` — and
//! `root` is the level of every target no logger names. DescribeConfigs lists them,
//! IncrementalAlterConfigs SETs a logger's level or DELETEs it (back to its parent's).
//!
//! As in Kafka, levels set this way last until the process ends (the next start takes
//! `STRATA_LOG` again): they are for looking into a running broker, not configuration.
//!
//! Invariant: the filter in force is always the one [`Loggers`] would describe — it is
//! rebuilt from the levels on every change, under the same lock.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Replaces the process's log filter with one built from the directives given.
type Reload = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

pub const ROOT: &str = "root";

/// Loggers always listed (with the level they inherit when none is set): this product's
/// crates and the libraries whose logs matter.
const KNOWN: &[&str] = &[
    "strata_broker",
    "strata_cache",
    "strata_metadata",
    "strata_objstore",
    "openraft",
    "object_store",
    "foyer",
];

/// Kafka's log4j levels, each as the `tracing` level it becomes.
const LEVELS: &[(&str, &str)] = &[
    ("OFF", "off"),
    ("FATAL", "error"),
    ("ERROR", "error"),
    ("WARN", "warn"),
    ("INFO", "info"),
    ("DEBUG", "debug"),
    ("TRACE", "trace"),
];

pub struct Loggers {
    levels: Mutex<Levels>,
    reload: Reload,
}

struct Levels {
    /// The level of `root`, in `tracing`'s spelling.
    root: String,
    /// Loggers given a level of their own.
    targets: BTreeMap<String, String>,
    /// Directives of `STRATA_LOG` that are more than a target and a level (span or field
    /// filters): kept as they are, listed under no logger.
    other: Vec<String>,
}

impl Levels {
    fn parse(directives: &str) -> Levels {
        let mut levels = Levels {
            root: "error".into(),
            targets: BTreeMap::new(),
            other: Vec::new(),
        };
        for d in directives
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            match d.split_once('=') {
                None if tracing_level(d).is_some() => levels.root = d.to_ascii_lowercase(),
                Some((target, level)) if is_target(target) && tracing_level(level).is_some() => {
                    levels
                        .targets
                        .insert(target.to_string(), level.to_ascii_lowercase());
                }
                _ => levels.other.push(d.to_string()),
            }
        }
        levels
    }

    fn directives(&self) -> String {
        let mut all = vec![self.root.clone()];
        all.extend(self.other.iter().cloned());
        all.extend(self.targets.iter().map(|(t, l)| format!("{t}={l}")));
        all.join(",")
    }

    /// A logger's level: its own, else its nearest named parent's, else root's.
    fn of(&self, logger: &str) -> &str {
        let mut name = logger;
        loop {
            if let Some(level) = self.targets.get(name) {
                return level;
            }
            match name.rsplit_once("::") {
                Some((parent, _)) => name = parent,
                None => return &self.root,
            }
        }
    }
}

impl Loggers {
    /// Installs the process's log subscriber (stderr) filtered by `directives` (an env-filter
    /// string, as `STRATA_LOG`), and returns what changes its levels afterwards.
    pub fn install(directives: &str) -> Loggers {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let levels = Levels::parse(directives);
        let filter = tracing_subscriber::EnvFilter::try_new(levels.directives())
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
        tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colour for a terminal only: a log file or a collector gets plain text.
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init();
        Loggers::with_reload(
            levels,
            Box::new(move |d| {
                let filter =
                    tracing_subscriber::EnvFilter::try_new(d).map_err(|e| e.to_string())?;
                handle.reload(filter).map_err(|e| e.to_string())
            }),
        )
    }

    fn with_reload(levels: Levels, reload: Reload) -> Loggers {
        Loggers {
            levels: Mutex::new(levels),
            reload,
        }
    }

    /// Every logger listed (root first) with its level in Kafka's spelling.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        let levels = self.levels.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<&str> = KNOWN.to_vec();
        names.extend(levels.targets.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        std::iter::once(ROOT)
            .chain(names)
            .map(|n| {
                let level = if n == ROOT {
                    &levels.root
                } else {
                    levels.of(n)
                };
                (n.to_string(), kafka_level(level))
            })
            .collect()
    }

    /// Checks, then applies, `changes` in order: `(logger, Some(level))` sets a level (Kafka's
    /// spelling), `(logger, None)` removes a logger's own level. All or none.
    pub fn alter(
        &self,
        changes: &[(&str, Option<&str>)],
        validate_only: bool,
    ) -> Result<(), String> {
        let mut levels = self.levels.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = Levels {
            root: levels.root.clone(),
            targets: levels.targets.clone(),
            other: levels.other.clone(),
        };
        for (logger, level) in changes {
            if *logger != ROOT && !is_target(logger) {
                return Err(format!(
                    "'{logger}' is not a logger: a module path such as strata_broker::replication, or root"
                ));
            }
            match level {
                Some(level) => {
                    let level = tracing_level(level).ok_or_else(|| {
                        format!(
                            "'{level}' is not a log level: {}",
                            LEVELS
                                .iter()
                                .map(|(k, _)| *k)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?;
                    if *logger == ROOT {
                        next.root = level.to_string();
                    } else {
                        next.targets.insert(logger.to_string(), level.to_string());
                    }
                }
                None if *logger == ROOT => {
                    return Err("the root logger's level cannot be removed".into())
                }
                None => {
                    next.targets.remove(*logger);
                }
            }
        }
        if validate_only {
            return Ok(());
        }
        (self.reload)(&next.directives())?;
        tracing::info!(filter = %next.directives(), "log levels changed");
        *levels = next;
        Ok(())
    }
}

/// A level in Kafka's spelling (any case) or `tracing`'s, as `tracing` spells it.
fn tracing_level(level: &str) -> Option<&'static str> {
    let upper = level.to_ascii_uppercase();
    LEVELS.iter().find(|(k, _)| *k == upper).map(|(_, t)| *t)
}

fn kafka_level(level: &str) -> &'static str {
    LEVELS
        .iter()
        // FATAL and ERROR both become `error`: show ERROR.
        .filter(|(k, _)| *k != "FATAL")
        .find(|(_, t)| *t == level)
        .map_or("INFO", |(k, _)| *k)
}

/// A Rust module path: identifiers joined by `::`.
fn is_target(name: &str) -> bool {
    !name.is_empty()
        && name.split("::").all(|part| {
            !part.is_empty()
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !part.starts_with(|c: char| c.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn loggers(directives: &str) -> (Loggers, Arc<Mutex<Vec<String>>>) {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        let reload: Reload = Box::new(move |d| {
            seen.lock().unwrap().push(d.to_string());
            Ok(())
        });
        (
            Loggers::with_reload(Levels::parse(directives), reload),
            applied,
        )
    }

    fn level<'a>(list: &'a [(String, &'static str)], name: &str) -> &'a str {
        list.iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| *l)
            .unwrap()
    }

    #[test]
    fn loggers_inherit_from_their_parents_and_root() {
        let (l, _) = loggers("info,openraft=warn,strata_broker::replication=debug,[span]=trace");
        let list = l.list();
        assert_eq!(list[0], ("root".to_string(), "INFO"));
        assert_eq!(level(&list, "openraft"), "WARN");
        assert_eq!(level(&list, "strata_broker"), "INFO");
        assert_eq!(level(&list, "strata_broker::replication"), "DEBUG");
    }

    #[test]
    fn changes_rebuild_the_filter_and_bad_ones_change_nothing() {
        let (l, applied) = loggers("info,[span]=trace");
        l.alter(
            &[("strata_broker::log", Some("DEBUG")), (ROOT, Some("warn"))],
            false,
        )
        .unwrap();
        assert_eq!(
            applied.lock().unwrap().last().unwrap(),
            "warn,[span]=trace,strata_broker::log=debug"
        );
        assert_eq!(level(&l.list(), "strata_broker::log"), "DEBUG");
        assert_eq!(level(&l.list(), "strata_broker"), "WARN");
        l.alter(&[("strata_broker::log", None)], false).unwrap();
        assert!(
            !l.list().iter().any(|(n, _)| n == "strata_broker::log"),
            "a logger without a level of its own is listed only if known"
        );
        let before = applied.lock().unwrap().len();
        let err = l.alter(&[("openraft", Some("DEBUG")), ("x", Some("LOUD"))], false);
        assert!(err.unwrap_err().contains("not a log level"));
        assert!(l
            .alter(&[(ROOT, None)], false)
            .unwrap_err()
            .contains("root"));
        assert!(l
            .alter(&[("a b", Some("INFO"))], false)
            .unwrap_err()
            .contains("not a logger"));
        l.alter(&[("openraft", Some("TRACE"))], true).unwrap();
        assert_eq!(applied.lock().unwrap().len(), before, "nothing applied");
        assert_eq!(level(&l.list(), "openraft"), "WARN");
    }
}
