//! `strata group list|describe|delete|reset-offsets`: consumer groups through librdkafka.
//!
//! - `list` — every group with its state and protocol type (ListGroups + DescribeGroups);
//! - `describe` — members with their decoded assignments, and per partition the committed
//!   offset, log end, lag in records and in seconds (the age of the first unread record);
//!   `--watch` samples twice and reports whether each partition is draining or falling
//!   behind, warning when unread data is close to its topic's retention;
//! - `delete` — DeleteGroups;
//! - `reset-offsets` — commits new offsets in the group's name (without joining it), which
//!   only an empty group accepts.

mod assignment;
mod clients;
mod delete;
mod describe;
mod list;
mod reset;
mod table;

use clap::Subcommand;

pub(crate) use assignment::decode_assignment;
pub(crate) use clients::describe_group;
use delete::DeleteArgs;
use describe::DescribeArgs;
use list::ListArgs;
use reset::ResetArgs;

use crate::common::ConnectArgs;

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups, one per line with state and protocol type.
    List(ListArgs),
    /// Show a group's members, assignments, committed offsets and lag.
    Describe(DescribeArgs),
    /// Delete groups (only groups without active members can be deleted).
    Delete(DeleteArgs),
    /// Set a group's committed offsets for a topic (the group must have no active members).
    ResetOffsets(ResetArgs),
}

impl GroupCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            GroupCommand::List(a) => &a.conn,
            GroupCommand::Describe(a) => &a.conn,
            GroupCommand::Delete(a) => &a.conn,
            GroupCommand::ResetOffsets(a) => &a.conn,
        }
    }
}

pub fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List(args) => list::run(args),
        GroupCommand::Describe(args) => describe::run(args),
        GroupCommand::Delete(args) => delete::run(args),
        GroupCommand::ResetOffsets(args) => reset::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::reset::ResetTarget;
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: GroupCommand,
    }

    fn parse(args: &[&str]) -> Result<GroupCommand, clap::Error> {
        use clap::Parser as _;
        Cli::try_parse_from(std::iter::once("group").chain(args.iter().copied())).map(|c| c.command)
    }

    fn reset(args: &[&str]) -> Result<ResetArgs, clap::Error> {
        let mut all = vec!["reset-offsets", "g", "--topic", "t"];
        all.extend(args);
        match parse(&all)? {
            GroupCommand::ResetOffsets(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reset_needs_exactly_one_target() {
        assert!(reset(&[]).is_err());
        assert!(reset(&["--to-earliest", "--to-latest"]).is_err());
        assert!(reset(&["--to-offset", "3", "--to-timestamp", "5"]).is_err());
        let a = reset(&["--to-offset", "3", "--partition", "1", "--dry-run"]).unwrap();
        assert_eq!(ResetTarget::from_args(&a).unwrap(), ResetTarget::Offset(3));
        assert_eq!(a.partition, Some(1));
        assert!(a.dry_run);
        let a = reset(&["--to-earliest"]).unwrap();
        assert_eq!(ResetTarget::from_args(&a).unwrap(), ResetTarget::Earliest);
        let a = reset(&["--to-timestamp", "1700000000000"]).unwrap();
        assert_eq!(
            ResetTarget::from_args(&a).unwrap(),
            ResetTarget::Timestamp(1_700_000_000_000)
        );
        let a = reset(&["--to-offset=-1"]).unwrap();
        assert!(ResetTarget::from_args(&a).is_err());
        assert!(
            parse(&["reset-offsets", "g", "--to-latest"]).is_err(),
            "topic required"
        );
    }

    #[test]
    fn describe_and_delete_arguments() {
        assert!(parse(&["describe", "g", "--watch", "0"]).is_err());
        let GroupCommand::Describe(a) = parse(&["describe", "g", "--watch", "5"]).unwrap() else {
            panic!()
        };
        assert_eq!(a.watch, Some(5));
        assert!(parse(&["describe"]).is_err());
        assert!(parse(&["delete"]).is_err());
        let GroupCommand::Delete(a) = parse(&["delete", "a", "b"]).unwrap() else {
            panic!()
        };
        assert_eq!(a.groups, vec!["a", "b"]);
    }
}
