//! Applying the security commands to the replicated state ([`crate::state::SecurityState`]):
//! SCRAM credentials (KIP-554), ACLs ([`crate::acl`]) and client quotas ([`crate::quota`]).
//!
//! Invariants:
//! - No secret is stored: a SCRAM credential is the salt, the iteration count and the two
//!   keys derived from the salted password (RFC 5802's StoredKey and ServerKey), from which the
//!   password cannot be recovered and with which a client cannot authenticate.
//! - Applying a command is pure and deterministic (as all of [`crate::state`]); a rejected one
//!   changes nothing.
//! - The security state is shared between successive cluster states (`Arc`): only a command
//!   that changes it copies it.

use std::sync::Arc;

use crate::acl::AclBinding;
use crate::command::{CommandResult, ScramCredential};
use crate::quota::QuotaAlteration;
use crate::state::ClusterState;

impl ClusterState {
    pub(crate) fn upsert_scram(
        &mut self,
        user: &str,
        mechanism: &str,
        credential: &ScramCredential,
    ) -> CommandResult {
        if user.is_empty() || mechanism.is_empty() {
            return CommandResult::InvalidRequest("empty user or mechanism".into());
        }
        Arc::make_mut(&mut self.security)
            .scram
            .entry(user.to_string())
            .or_default()
            .insert(mechanism.to_string(), credential.clone());
        CommandResult::Ok
    }

    pub(crate) fn delete_scram(&mut self, user: &str, mechanism: &str) -> CommandResult {
        let exists = self
            .security
            .scram
            .get(user)
            .is_some_and(|m| m.contains_key(mechanism));
        if !exists {
            return CommandResult::NotFound;
        }
        let security = Arc::make_mut(&mut self.security);
        if let Some(mechanisms) = security.scram.get_mut(user) {
            mechanisms.remove(mechanism);
            if mechanisms.is_empty() {
                security.scram.remove(user);
            }
        }
        CommandResult::Ok
    }

    pub(crate) fn create_acls(&mut self, acls: &[AclBinding]) -> CommandResult {
        if let Some(why) = acls.iter().find_map(AclBinding::invalid) {
            return CommandResult::InvalidRequest(why);
        }
        if acls.iter().all(|a| self.security.acls.contains(a)) {
            return CommandResult::Ok;
        }
        let security = Arc::make_mut(&mut self.security);
        security.acls.extend(acls.iter().cloned());
        CommandResult::Ok
    }

    pub(crate) fn delete_acls(&mut self, acls: &[AclBinding]) -> CommandResult {
        if acls.iter().any(|a| self.security.acls.contains(a)) {
            let security = Arc::make_mut(&mut self.security);
            for acl in acls {
                security.acls.remove(acl);
            }
        }
        CommandResult::Ok
    }

    pub(crate) fn alter_quotas(&mut self, alterations: &[QuotaAlteration]) -> CommandResult {
        if let Some(why) = alterations.iter().find_map(QuotaAlteration::invalid) {
            return CommandResult::InvalidRequest(why);
        }
        let quotas = &mut Arc::make_mut(&mut self.security).quotas;
        for a in alterations {
            let values = quotas.entry(a.entity.clone()).or_default();
            for key in &a.remove {
                values.remove(key);
            }
            values.extend(a.set.iter().copied());
            if values.is_empty() {
                quotas.remove(&a.entity);
            }
        }
        CommandResult::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;

    fn credential(n: u8) -> ScramCredential {
        ScramCredential {
            salt: vec![n; 16],
            stored_key: vec![n; 32],
            server_key: vec![n; 32],
            iterations: 4096,
        }
    }

    #[test]
    fn credentials_are_upserted_and_deleted_per_user_and_mechanism() {
        let mut state = ClusterState::default();
        let before = state.security.clone();
        let upsert = |user: &str, mechanism: &str, n| Command::UpsertScramCredential {
            user: user.into(),
            mechanism: mechanism.into(),
            credential: credential(n),
        };
        assert_eq!(
            state.apply(&upsert("alice", "SCRAM-SHA-256", 1)),
            CommandResult::Ok
        );
        assert!(!Arc::ptr_eq(&before, &state.security), "copied on change");
        assert_eq!(
            state.apply(&upsert("alice", "SCRAM-SHA-512", 2)),
            CommandResult::Ok
        );
        assert_eq!(
            state.apply(&upsert("alice", "SCRAM-SHA-256", 3)),
            CommandResult::Ok
        );
        assert_eq!(
            state.security.scram["alice"]["SCRAM-SHA-256"],
            credential(3)
        );
        assert_eq!(state.security.scram["alice"].len(), 2);

        let delete = |user: &str, mechanism: &str| Command::DeleteScramCredential {
            user: user.into(),
            mechanism: mechanism.into(),
        };
        let kept = state.security.clone();
        assert_eq!(
            state.apply(&delete("bob", "SCRAM-SHA-256")),
            CommandResult::NotFound
        );
        assert!(
            Arc::ptr_eq(&kept, &state.security),
            "a refusal copies nothing"
        );
        assert_eq!(
            state.apply(&delete("alice", "SCRAM-SHA-256")),
            CommandResult::Ok
        );
        assert_eq!(
            state.apply(&delete("alice", "SCRAM-SHA-512")),
            CommandResult::Ok
        );
        assert!(
            state.security.scram.is_empty(),
            "a user without credentials is gone"
        );
        assert!(matches!(
            state.apply(&upsert("", "SCRAM-SHA-256", 1)),
            CommandResult::InvalidRequest(_)
        ));
    }

    #[test]
    fn acls_are_created_all_or_none_and_deleted_exactly() {
        use crate::acl::{AclOperation, PatternType, Permission, ResourceType};
        let acl = |name: &str| AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Write,
            permission: Permission::Allow,
        };
        let mut state = ClusterState::default();
        let create = |acls: Vec<AclBinding>| Command::CreateAcls { acls };
        assert_eq!(
            state.apply(&create(vec![acl("a"), acl("b")])),
            CommandResult::Ok
        );
        let kept = state.security.clone();
        assert_eq!(state.apply(&create(vec![acl("a")])), CommandResult::Ok);
        assert!(
            Arc::ptr_eq(&kept, &state.security),
            "a repeat copies nothing"
        );
        assert!(matches!(
            state.apply(&create(vec![acl("c"), acl("")])),
            CommandResult::InvalidRequest(_)
        ));
        assert_eq!(
            state.security.acls.len(),
            2,
            "none of a refused command is added"
        );
        assert_eq!(
            state.apply(&Command::DeleteAcls {
                acls: vec![acl("a"), acl("zz")]
            }),
            CommandResult::Ok
        );
        assert_eq!(
            state.security.acls.iter().collect::<Vec<_>>(),
            vec![&acl("b")]
        );
    }

    #[test]
    fn quotas_are_set_and_removed_per_entity_and_an_emptied_entity_is_gone() {
        use crate::quota::{EntityName, QuotaEntity, QuotaKey};
        let alice = QuotaEntity {
            user: Some(EntityName::Named("alice".into())),
            client_id: None,
        };
        let default_client = QuotaEntity {
            user: None,
            client_id: Some(EntityName::Default),
        };
        let alter = |entity: &QuotaEntity, set: Vec<(QuotaKey, f64)>, remove: Vec<QuotaKey>| {
            Command::AlterClientQuotas {
                alterations: vec![QuotaAlteration {
                    entity: entity.clone(),
                    set,
                    remove,
                }],
            }
        };
        let mut state = ClusterState::default();
        let produce = QuotaKey::ProducerByteRate;
        let request = QuotaKey::RequestPercentage;
        assert_eq!(
            state.apply(&alter(
                &alice,
                vec![(produce, 1024.0), (request, 12.5)],
                vec![]
            )),
            CommandResult::Ok
        );
        assert_eq!(
            state.apply(&alter(&default_client, vec![(produce, 10.0)], vec![])),
            CommandResult::Ok
        );
        assert_eq!(state.security.quotas[&alice][&request], 12.5);
        assert_eq!(
            state.apply(&alter(&alice, vec![(produce, 2048.0)], vec![request])),
            CommandResult::Ok
        );
        assert_eq!(
            state.security.quotas[&alice].iter().collect::<Vec<_>>(),
            vec![(&produce, &2048.0)]
        );
        // Refusals change nothing: a fractional byte rate, a non-positive quota, no entity.
        let kept = state.security.clone();
        for refused in [
            alter(&alice, vec![(produce, 1.5)], vec![]),
            alter(&alice, vec![(request, 0.0)], vec![]),
            alter(&alice, vec![(request, f64::NAN)], vec![]),
            alter(&alice, vec![(request, 1.0)], vec![request]),
            alter(
                &QuotaEntity {
                    user: None,
                    client_id: None,
                },
                vec![(produce, 1.0)],
                vec![],
            ),
        ] {
            assert!(matches!(
                state.apply(&refused),
                CommandResult::InvalidRequest(_)
            ));
        }
        assert!(Arc::ptr_eq(&kept, &state.security));
        assert_eq!(
            state.apply(&alter(&alice, vec![], vec![produce])),
            CommandResult::Ok
        );
        assert!(!state.security.quotas.contains_key(&alice));
        // The stored quotas survive a snapshot (JSON, whose map keys are strings).
        let json = serde_json::to_string(&*state.security).unwrap();
        let back: crate::SecurityState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, *state.security);
    }
}
