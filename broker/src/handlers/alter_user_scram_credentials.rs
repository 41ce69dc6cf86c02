//! AlterUserScramCredentials (KIP-554): upsert or delete users' SCRAM credentials. The client
//! sends the salted password, never the password; the quorum keeps only the keys derived from
//! it (`strata_metadata::ScramCredential`).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use strata_metadata::{Command, ScramCredential};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::sasl::scram;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Broker,
    req: AlterUserScramCredentialsRequest,
    access: &Access,
) -> AlterUserScramCredentialsResponse {
    let authorized = access.cluster(AclOperation::Alter);
    // One result per user, in the order users first appear; the first error of a user wins
    // and none of that user's changes is made.
    let mut users: BTreeMap<String, Result<Vec<Command>, ApiError>> = BTreeMap::new();
    let mut order = Vec::new();
    let mut pairs = BTreeSet::new();
    let changes = req
        .deletions
        .iter()
        .map(|d| (d.name.as_str(), d.mechanism, None))
        .chain(
            req.upsertions
                .iter()
                .map(|u| (u.name.as_str(), u.mechanism, Some(u))),
        );
    for (user, mech, upsert) in changes {
        if !users.contains_key(user) {
            order.push(user.to_string());
        }
        let entry = users.entry(user.to_string()).or_insert(Ok(Vec::new()));
        let change = (|| {
            if !authorized {
                return Err(super::reply::cluster_denied(AclOperation::Alter));
            }
            if user.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::UnacceptableCredential,
                    "Username must not be empty",
                ));
            }
            let m = scram::Mechanism::from_kafka_type(mech).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::UnsupportedSaslMechanism,
                    format!("Unknown SCRAM mechanism {mech}"),
                )
            })?;
            if !pairs.insert((user.to_string(), mech)) {
                return Err(ApiError::new(
                    ErrorCode::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                ));
            }
            let Some(u) = upsert else {
                return Ok(Command::DeleteScramCredential {
                    user: user.to_string(),
                    mechanism: m.name().to_string(),
                });
            };
            let iterations = u32::try_from(u.iterations)
                .ok()
                .filter(|i| (scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(i))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::UnacceptableCredential,
                        format!(
                            "Iterations {} must be between {} and {}",
                            u.iterations,
                            scram::MIN_ITERATIONS,
                            scram::MAX_ITERATIONS
                        ),
                    )
                })?;
            if u.salt.is_empty() || u.salted_password.len() != m.key_len() {
                return Err(ApiError::new(
                    ErrorCode::UnacceptableCredential,
                    format!(
                        "a {} credential needs a salt and a {}-byte salted password",
                        m.name(),
                        m.key_len()
                    ),
                ));
            }
            let c = m.credential(&u.salted_password, &u.salt, iterations);
            Ok(Command::UpsertScramCredential {
                user: user.to_string(),
                mechanism: m.name().to_string(),
                credential: ScramCredential {
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations,
                },
            })
        })();
        match (entry, change) {
            (Ok(cmds), Ok(cmd)) => cmds.push(cmd),
            (entry @ Ok(_), Err(e)) => *entry = Err(e),
            (Err(_), _) => {}
        }
    }
    let mut results = Vec::with_capacity(order.len());
    for user in order {
        let outcome = match users
            .remove(&user)
            .expect("each user in order has an entry")
        {
            Err(e) => Err(e),
            Ok(cmds) => apply_all(broker, cmds).await,
        };
        let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(user.clone()));
        results.push(match outcome {
            Ok(()) => {
                tracing::info!(user = %user, "SCRAM credentials altered");
                access.audit("user_altered", serde_json::json!({ "user": user }));
                result
            }
            Err(e) => result
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        });
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

async fn apply_all(broker: &Broker, cmds: Vec<Command>) -> Result<(), ApiError> {
    for cmd in cmds {
        broker.node.apply(cmd).await.map_err(|e| match e.code {
            ErrorCode::ResourceNotFound => ApiError::new(
                e.code,
                "Attempt to delete a user credential that does not exist",
            ),
            _ => e,
        })?;
    }
    Ok(())
}
