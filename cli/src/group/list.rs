//! `strata group list`: every group with its state and protocol type.

use anyhow::{anyhow, Context as _};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::common::{emit, ConnectArgs};

use super::table::render_table;

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub(super) fn run(args: ListArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    // No group.id: listing joins nothing and fetches no offsets.
    let consumer: BaseConsumer = conn
        .client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating consumer")?;
    let list = consumer
        .fetch_group_list(None, conn.request_timeout())
        .map_err(|e| {
            anyhow!(
                "cannot list groups from {} within {} ms: {e}",
                conn.bootstrap_server,
                conn.request_timeout().as_millis()
            )
        })?;
    let mut groups: Vec<_> = list.groups().iter().collect();
    groups.sort_by(|a, b| a.name().cmp(b.name()));
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let protocol_type = if g.protocol_type().is_empty() {
                "-"
            } else {
                g.protocol_type()
            };
            vec![
                g.name().to_string(),
                g.state().to_string(),
                protocol_type.to_string(),
                g.members().len().to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        eprintln!("no groups");
        return Ok(());
    }
    for line in render_table(&["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"], &rows) {
        emit(format_args!("{line}"))?;
    }
    Ok(())
}
