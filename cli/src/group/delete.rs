//! `strata group delete`: DeleteGroups.

use anyhow::{bail, Context as _};
use clap::Args;
use rdkafka::error::RDKafkaErrorCode;

use crate::common::{
    admin_client, admin_options, block_on, current_thread_runtime, emit, ConnectArgs,
};

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id(s).
    #[arg(required = true)]
    pub groups: Vec<String>,
}

pub(super) fn run(args: DeleteArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let admin = admin_client(conn)?;
    let names: Vec<&str> = args.groups.iter().map(String::as_str).collect();
    let results = block_on(
        &current_thread_runtime()?,
        conn,
        "delete groups",
        admin.delete_groups(&names, &admin_options(conn)),
    )?
    .context("deleting groups")?;
    let mut failed = 0;
    for result in &results {
        match result {
            Ok(name) => emit(format_args!("deleted group {name}"))?,
            Err((name, code)) => {
                failed += 1;
                eprintln!("cannot delete group `{name}`: {}", delete_error(*code));
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} group(s) not deleted", results.len());
    }
    Ok(())
}

pub(super) fn delete_error(code: RDKafkaErrorCode) -> String {
    match code {
        RDKafkaErrorCode::NonEmptyGroup => "group has active members; stop them first".to_string(),
        RDKafkaErrorCode::GroupIdNotFound => "no such group".to_string(),
        other => other.to_string(),
    }
}
