//! DescribeUserScramCredentials (KIP-554): each user's mechanisms and iteration counts, never
//! a salt or key.

use std::collections::BTreeSet;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::sasl::scram;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub fn handle(
    broker: &Broker,
    req: DescribeUserScramCredentialsRequest,
    access: &Access,
) -> DescribeUserScramCredentialsResponse {
    if !access.cluster(AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is not authorized")));
    }
    let state = broker.node.metadata.state();
    let scram_users = &state.security.scram;
    let describe = |user: &str| {
        let infos: Vec<CredentialInfo> = scram_users
            .get(user)
            .into_iter()
            .flatten()
            .filter_map(|(name, c)| {
                Some(
                    CredentialInfo::default()
                        .with_mechanism(scram::Mechanism::from_name(name)?.kafka_type())
                        .with_iterations(c.iterations as i32),
                )
            })
            .collect();
        let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
        if infos.is_empty() {
            result
                .with_error_code(ErrorCode::ResourceNotFound.code())
                .with_error_message(Some(str_bytes(format!(
                    "Attempt to describe a user credential that does not exist: {user}"
                ))))
        } else {
            result.with_credential_infos(infos)
        }
    };
    let results = match req.users {
        // Null or empty: every user with a credential.
        None => scram_users.keys().map(|u| describe(u)).collect(),
        Some(users) if users.is_empty() => scram_users.keys().map(|u| describe(u)).collect(),
        Some(users) => {
            let mut seen = BTreeSet::new();
            let duplicated: BTreeSet<&str> = users
                .iter()
                .filter(|u| !seen.insert(u.name.as_str()))
                .map(|u| u.name.as_str())
                .collect();
            let mut reported = BTreeSet::new();
            users
                .iter()
                .filter(|u| reported.insert(u.name.as_str()))
                .map(|u| {
                    let name = u.name.as_str();
                    if duplicated.contains(name) {
                        DescribeUserScramCredentialsResult::default()
                            .with_user(u.name.clone())
                            .with_error_code(ErrorCode::DuplicateResource.code())
                            .with_error_message(Some(str_bytes(format!(
                                "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                            ))))
                    } else {
                        describe(name)
                    }
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
