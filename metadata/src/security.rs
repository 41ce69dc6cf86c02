//! Applying the security commands to the replicated state ([`crate::state::SecurityState`]):
//! SCRAM credentials (KIP-554) and ACLs ([`crate::acl`]).
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
}
