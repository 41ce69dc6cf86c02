//! `strata health`: one node's admin endpoint probed, for container health checks and
//! scripts that wait for a node (the image's HEALTHCHECK runs it; it needs no curl).

use clap::Args;

use crate::cluster::AdminArgs;
use crate::common::admin_request;

#[derive(Args, Debug)]
pub struct HealthArgs {
    /// Only check that the process is up (`/healthz`), not that it is ready to serve
    /// (`/readyz`: metadata loaded, the Kafka listener accepting).
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// Ok when the node answers 200; the error says what it answered instead.
pub fn run(args: HealthArgs) -> anyhow::Result<()> {
    let path = if args.live { "/healthz" } else { "/readyz" };
    let body = admin_request(&args.admin.admin_addr, "GET", path)
        .map_err(|e| anyhow::anyhow!("{} {path}: {e:#}", args.admin.admin_addr))?;
    println!("{}", body.trim());
    Ok(())
}
