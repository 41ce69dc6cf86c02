//! `strata objstore init`: the bucket made ready before the first broker starts (created if
//! missing, incomplete multipart uploads aborted by a lifecycle rule), with the brokers' own
//! object store settings so the same configuration file or `STRATA_*` variables serve both.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::common::emit;

#[derive(Subcommand, Debug)]
pub enum ObjstoreCommand {
    /// Create the bucket if it is missing and add a lifecycle rule aborting incomplete
    /// multipart uploads under the prefix (kept beside any rules already there). Idempotent.
    Init(InitArgs),
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// A broker configuration file to take the object store settings from (endpoint, region,
    /// keys, plain HTTP); `STRATA_*` variables apply on top, as for `strata serve`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The store, `s3://bucket/prefix` (default: the configuration's `object_store`).
    #[arg(long = "object-store", value_name = "URL")]
    pub object_store: Option<String>,
    /// Abort multipart uploads still incomplete this many days after they started.
    #[arg(long, default_value_t = 1, value_name = "DAYS")]
    pub abort_incomplete_multipart_days: u32,
}

pub fn run(cmd: ObjstoreCommand) -> anyhow::Result<()> {
    let ObjstoreCommand::Init(args) = cmd;
    let mut cfg =
        strata_broker::config::BrokerConfig::load(args.config.as_deref(), std::env::vars())?;
    if let Some(url) = args.object_store {
        cfg.object_store = Some(url);
    }
    if cfg.object_store.is_none() {
        anyhow::bail!(
            "no object store: pass --object-store s3://BUCKET/PREFIX (or object_store in --config)"
        );
    }
    let store = cfg.object_store_config()?;
    let done = crate::common::current_thread_runtime()?.block_on(strata_objstore::init_bucket(
        &store,
        args.abort_incomplete_multipart_days,
    ))?;
    emit(format_args!(
        "bucket={} created={} lifecycle_rule={}",
        done.bucket,
        done.created,
        if done.rule_added { "added" } else { "present" }
    ))
}
