//! `strata`: the broker (`strata serve`) and a Kafka client CLI on one binary.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Kafka-compatible broker with an object-storage tier"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker (with no flags: a complete single node on 127.0.0.1:9092, data in ./strata-data).
    Serve(strata_broker::serve::ServeArgs),
    #[command(flatten)]
    Client(strata_cli::ClientCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => Ok(strata_broker::serve::run(args)?),
        Command::Client(cmd) => strata_cli::run(cmd),
    }
}
