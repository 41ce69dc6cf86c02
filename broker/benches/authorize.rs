//! The authorizer's cost per decision, and of rebuilding its index after an ACL change, with
//! 0 to 10,000 ACLs: `cargo bench -p strata-broker --bench authorize`.
//!
//! The ACLs are what a multi-tenant cluster holds: per tenant, literal grants on its topics
//! and groups and a prefixed grant on its namespace, plus a few denies. A request checks a
//! handful of resources (its topics, its group), so a request's authorization cost is a few
//! decisions.

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use strata_broker::security::authorizer::{Access, AclIndex};
use strata_broker::security::Principal;
use strata_metadata::acl::{AclBinding, AclOperation, PatternType, Permission, ResourceType};

/// `count` ACLs over `count / 10` tenants.
fn acls(count: usize) -> Vec<AclBinding> {
    let acl = |rt, name: String, pattern, tenant: usize, op, permission| AclBinding {
        resource_type: rt,
        resource_name: name,
        pattern_type: pattern,
        principal: format!("User:tenant{tenant}"),
        host: "*".into(),
        operation: op,
        permission,
    };
    let mut out = Vec::with_capacity(count);
    let mut tenant = 0;
    while out.len() < count {
        use AclOperation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let t = tenant;
        out.extend([
            acl(Topic, format!("t{t}.orders"), Literal, t, Write, Allow),
            acl(Topic, format!("t{t}.orders"), Literal, t, Read, Allow),
            acl(Topic, format!("t{t}.events"), Literal, t, Write, Allow),
            acl(Topic, format!("t{t}.events"), Literal, t, Read, Allow),
            acl(Topic, format!("t{t}."), Prefixed, t, Describe, Allow),
            acl(Topic, format!("t{t}.audit"), Literal, t, Write, Deny),
            acl(Group, format!("t{t}.app"), Literal, t, Read, Allow),
            acl(Group, format!("t{t}."), Prefixed, t, Describe, Allow),
            acl(
                TransactionalId,
                format!("t{t}.tx"),
                Prefixed,
                t,
                Write,
                Allow,
            ),
            acl(
                Cluster,
                "kafka-cluster".into(),
                Literal,
                t,
                IdempotentWrite,
                Allow,
            ),
        ]);
        tenant += 1;
    }
    out.truncate(count);
    out
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("authorize");
    for count in [0usize, 100, 10_000] {
        let set = acls(count);
        let index = Arc::new(AclIndex::build(&set));
        // A tenant in the middle: its grants are among all the others'.
        let me = Principal::user(&format!("tenant{}", count / 20));
        let mine = format!("t{}.orders", count / 20);
        let access = Access::over(index, &me, "10.1.2.3", false);
        group.bench_with_input(
            BenchmarkId::new("allowed_topic_write", count),
            &(),
            |b, _| b.iter(|| access.topic(AclOperation::Write, black_box(&mine))),
        );
        group.bench_with_input(BenchmarkId::new("denied_topic_read", count), &(), |b, _| {
            b.iter(|| {
                access.sees(
                    AclOperation::Read,
                    ResourceType::Topic,
                    black_box("t0.secret"),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("index_rebuild", count), &set, |b, set| {
            b.iter(|| AclIndex::build(black_box(set)))
        });
    }
    // One topic every principal may read (a shared feed): 10,000 ACLs on one name.
    let shared: Vec<AclBinding> = (0..10_000)
        .map(|p| AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "feed".into(),
            pattern_type: PatternType::Literal,
            principal: format!("User:reader{p}"),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: Permission::Allow,
        })
        .collect();
    let access = Access::over(
        Arc::new(AclIndex::build(&shared)),
        &Principal::user("reader5000"),
        "10.1.2.3",
        false,
    );
    group.bench_function("shared_topic_read/10000", |b| {
        b.iter(|| access.topic(AclOperation::Read, black_box("feed")))
    });
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
