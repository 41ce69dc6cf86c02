//! `strata`: the broker (`strata serve`) and a Kafka client CLI on one binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Kafka-compatible broker with an object-storage tier"
)]
struct Cli {
    /// On failure, print the error's full chain and a backtrace (errors are one line otherwise).
    #[arg(long, global = true)]
    debug: bool,
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

/// Errors reach people as one line, `error: ` and the cause with its context (which names the
/// fix where there is one), whatever `RUST_BACKTRACE` says; `--debug` adds the backtrace.
fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.debug {
        // Still one thread: anyhow captures a backtrace where each error is made.
        std::env::set_var("RUST_LIB_BACKTRACE", "1");
    }
    let result = match cli.command {
        Command::Serve(args) => strata_broker::serve::run(args).map_err(anyhow::Error::from),
        Command::Client(cmd) => strata_cli::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if cli.debug => {
            eprintln!("error: {e:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
