//! `strata user create|delete|list`: SCRAM users (KIP-554's AlterUserScramCredentials and
//! DescribeUserScramCredentials, which librdkafka's Rust binding does not offer), spoken with
//! the broker's own client. The password is salted and hashed here: only the salted password
//! crosses the network, and the quorum stores only keys derived from it.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand, ValueEnum};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use strata_broker::sasl::scram;

use crate::cluster;
use crate::cluster::kafka::{self, str_bytes};
use crate::common::{emit, ConnectArgs};

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user, or set a new password for one (SCRAM credentials).
    Create(CreateArgs),
    /// Delete a user's SCRAM credentials.
    Delete(DeleteArgs),
    /// List users with their SCRAM mechanisms and iteration counts.
    List(ListArgs),
}

impl UserCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            UserCommand::Create(a) => &a.conn,
            UserCommand::Delete(a) => &a.conn,
            UserCommand::List(a) => &a.conn,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MechanismArg {
    #[value(name = "SCRAM-SHA-256")]
    Sha256,
    #[value(name = "SCRAM-SHA-512")]
    Sha512,
}

impl MechanismArg {
    fn mechanism(self) -> scram::Mechanism {
        match self {
            MechanismArg::Sha256 => scram::Mechanism::Sha256,
            MechanismArg::Sha512 => scram::Mechanism::Sha512,
        }
    }
}

/// The mechanisms named, or both.
fn mechanisms(named: &[MechanismArg]) -> Vec<scram::Mechanism> {
    if named.is_empty() {
        scram::Mechanism::ALL.to_vec()
    } else {
        named.iter().map(|m| m.mechanism()).collect()
    }
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    pub name: String,
    /// The password (or set STRATA_USER_PASSWORD, which keeps it out of the process list).
    #[arg(long, env = "STRATA_USER_PASSWORD", hide_env_values = true)]
    pub password: String,
    /// Mechanisms to create credentials for (repeatable) [default: both].
    #[arg(long = "mechanism", value_enum)]
    pub mechanisms: Vec<MechanismArg>,
    /// PBKDF2 iterations (Kafka accepts 4096 to 16384).
    #[arg(long, default_value_t = 8192)]
    pub iterations: u32,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    pub name: String,
    /// Mechanisms to delete (repeatable) [default: every one the user has].
    #[arg(long = "mechanism", value_enum)]
    pub mechanisms: Vec<MechanismArg>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only these users [default: all].
    pub names: Vec<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: UserCommand) -> anyhow::Result<()> {
    cluster::block(async {
        match cmd {
            UserCommand::Create(a) => create(a).await,
            UserCommand::Delete(a) => delete(a).await,
            UserCommand::List(a) => list(a).await,
        }
    })
}

/// A user's result: an error when the broker refused (its code and message).
fn answered(user: &StrBytes, code: i16, message: Option<&StrBytes>) -> anyhow::Result<()> {
    if code != 0 {
        bail!(
            "user {}: {} (error {code})",
            user.as_str(),
            message.map_or("", |m| m.as_str())
        );
    }
    Ok(())
}

async fn alter(conn: &ConnectArgs, req: AlterUserScramCredentialsRequest) -> anyhow::Result<()> {
    let mut c = kafka::connect(conn).await?;
    let resp = c.call(0, &req).await.context("AlterUserScramCredentials")?;
    for r in &resp.results {
        answered(&r.user, r.error_code, r.error_message.as_ref())?;
    }
    Ok(())
}

async fn create(a: CreateArgs) -> anyhow::Result<()> {
    if a.password.is_empty() {
        bail!("the password is empty");
    }
    let upsertions = mechanisms(&a.mechanisms)
        .into_iter()
        .map(|m| {
            let salt = scram::random(32);
            let salted = m.salted_password(&a.password, &salt, a.iterations);
            ScramCredentialUpsertion::default()
                .with_name(str_bytes(&a.name))
                .with_mechanism(m.kafka_type())
                .with_iterations(a.iterations as i32)
                .with_salt(salt.into())
                .with_salted_password(salted.into())
        })
        .collect();
    let req = AlterUserScramCredentialsRequest::default().with_upsertions(upsertions);
    alter(&a.conn, req).await?;
    eprintln!("user {}: credentials set", a.name);
    Ok(())
}

async fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let named = if a.mechanisms.is_empty() {
        // Every mechanism the user has, so a missing one is not an error.
        described(&a.conn, std::slice::from_ref(&a.name))
            .await?
            .into_iter()
            .flat_map(|(_, ms)| ms.into_iter().map(|(m, _)| m))
            .collect()
    } else {
        mechanisms(&a.mechanisms)
    };
    let deletions = named
        .into_iter()
        .map(|m| {
            ScramCredentialDeletion::default()
                .with_name(str_bytes(&a.name))
                .with_mechanism(m.kafka_type())
        })
        .collect();
    let req = AlterUserScramCredentialsRequest::default().with_deletions(deletions);
    alter(&a.conn, req).await?;
    eprintln!("user {}: deleted", a.name);
    Ok(())
}

/// Users with their mechanisms and iterations.
async fn described(
    conn: &ConnectArgs,
    names: &[String],
) -> anyhow::Result<Vec<(String, Vec<(scram::Mechanism, i32)>)>> {
    let mut c = kafka::connect(conn).await?;
    let users = (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|n| UserName::default().with_name(str_bytes(n)))
            .collect()
    });
    let resp = c
        .call(
            0,
            &DescribeUserScramCredentialsRequest::default().with_users(users),
        )
        .await
        .context("DescribeUserScramCredentials")?;
    if resp.error_code != 0 {
        bail!(
            "DescribeUserScramCredentials: {} (error {})",
            resp.error_message.as_ref().map_or("", |m| m.as_str()),
            resp.error_code
        );
    }
    let mut out = Vec::new();
    for r in resp.results {
        answered(&r.user, r.error_code, r.error_message.as_ref())?;
        let ms = r
            .credential_infos
            .iter()
            .filter_map(|i| {
                Some((
                    scram::Mechanism::from_kafka_type(i.mechanism)?,
                    i.iterations,
                ))
            })
            .collect();
        out.push((r.user.to_string(), ms));
    }
    Ok(out)
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let users = described(&a.conn, &a.names).await?;
    for (user, ms) in &users {
        let ms: Vec<String> = ms
            .iter()
            .map(|(m, i)| format!("{}:{i}", m.name()))
            .collect();
        emit(format_args!("{user}\t{}", ms.join(",")))?;
    }
    eprintln!("user list: {} users", users.len());
    Ok(())
}
