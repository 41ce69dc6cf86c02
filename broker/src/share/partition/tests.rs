use super::*;
use crate::clock::Clock;

const LIMITS: Limits = Limits {
    lock: Duration::from_secs(30),
    delivery_limit: 3,
    max_in_flight: 100,
    dead_letter_queue: false,
};

fn data(first: i64, last: i64) -> Batch {
    Batch {
        first,
        last,
        kind: BatchKind::Data,
    }
}

fn member(name: &str) -> Arc<str> {
    Arc::from(name)
}

fn ack(first: i64, last: i64, t: AckType) -> AckBatch {
    AckBatch {
        first,
        last,
        types: vec![t],
    }
}

fn acquired(first: i64, last: i64, deliveries: u16) -> Acquired {
    Acquired {
        first,
        last,
        deliveries,
    }
}

#[test]
fn new_records_are_handed_to_one_member_only() {
    let now = Clock::manual(0).instant();
    let (a, b) = (member("a"), member("b"));
    let mut p = SharePartition::new(10);
    let batches = [data(10, 14), data(15, 19)];
    let got = p.acquire(&a, &batches, 500, true, &LIMITS, now);
    assert_eq!(got, vec![acquired(10, 19, 1)]);
    assert_eq!((p.start(), p.end()), (10, 20));
    // The same records read again by another member: all held by `a`.
    assert_eq!(p.acquire(&b, &batches, 500, true, &LIMITS, now), vec![]);
    assert_eq!(p.next_fetch_offset(), 20);
    assert_eq!(p.counts().acquired, 10);
}

#[test]
fn accepting_moves_the_start_and_a_partial_accept_splits_the_run() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 9)], 500, true, &LIMITS, now);
    p.acknowledge("a", &[ack(3, 5, AckType::Accept)], &LIMITS, now)
        .unwrap();
    assert_eq!(p.start(), 0, "0..=2 are still acquired");
    let c = p.counts();
    assert_eq!((c.acquired, c.acknowledged), (7, 3));
    p.acknowledge("a", &[ack(0, 2, AckType::Accept)], &LIMITS, now)
        .unwrap();
    assert_eq!(p.start(), 6);
    p.acknowledge("a", &[ack(6, 9, AckType::Accept)], &LIMITS, now)
        .unwrap();
    assert_eq!((p.start(), p.end()), (10, 10));
    assert_eq!(p.counts(), Counts::default());
}

#[test]
fn released_records_go_to_the_next_fetch_with_their_delivery_count() {
    let now = Clock::manual(0).instant();
    let (a, b) = (member("a"), member("b"));
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 4), data(5, 9)], 500, true, &LIMITS, now);
    p.acknowledge(
        "a",
        &[ack(0, 4, AckType::Accept), ack(5, 9, AckType::Release)],
        &LIMITS,
        now,
    )
    .unwrap();
    assert_eq!(p.start(), 5);
    assert_eq!(p.next_fetch_offset(), 5);
    // The log read from 5 returns the batch again, and more after it.
    let got = p.acquire(&b, &[data(5, 9), data(10, 12)], 500, true, &LIMITS, now);
    assert_eq!(got, vec![acquired(5, 9, 2), acquired(10, 12, 1)]);
}

#[test]
fn an_expired_lock_releases_the_records_and_refuses_the_late_acknowledgement() {
    let clock = Clock::manual(0);
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 9)], 500, true, &LIMITS, clock.instant());
    assert_eq!(p.next_expiry(), Some(clock.instant() + LIMITS.lock));
    clock.advance(LIMITS.lock - Duration::from_millis(1));
    assert!(p.expire(clock.instant(), &LIMITS).is_empty());
    assert_eq!(p.counts().acquired, 10, "not yet");
    clock.advance(Duration::from_millis(1));
    let err = p
        .acknowledge("a", &[ack(0, 9, AckType::Accept)], &LIMITS, clock.instant())
        .unwrap_err();
    assert!(matches!(err, AckError::InvalidRecordState(m) if m.contains("expired")));
    assert!(p.expire(clock.instant(), &LIMITS).is_empty());
    assert_eq!(p.counts().available, 10);
    assert_eq!(p.next_expiry(), None);
}

#[test]
fn a_member_leaving_gives_its_records_back_without_counting_the_delivery() {
    let clock = Clock::manual(0);
    let mut p = SharePartition::new(0);
    let got = p.acquire(
        &member("a"),
        &[data(0, 4)],
        10,
        true,
        &LIMITS,
        clock.instant(),
    );
    assert_eq!(got, vec![acquired(0, 4, 1)]);
    assert!(p.release_member("a", &LIMITS).is_empty());
    let got = p.acquire(
        &member("b"),
        &[data(0, 4)],
        10,
        true,
        &LIMITS,
        clock.instant(),
    );
    assert_eq!(got, vec![acquired(0, 4, 1)], "the first delivery again");
    clock.advance(LIMITS.lock);
    assert!(p.expire(clock.instant(), &LIMITS).is_empty());
    let got = p.acquire(
        &member("c"),
        &[data(0, 4)],
        10,
        true,
        &LIMITS,
        clock.instant(),
    );
    assert_eq!(got, vec![acquired(0, 4, 2)], "an expired lock counts");
}

#[test]
fn the_delivery_limit_archives_a_record_as_a_dead_letter() {
    let clock = Clock::manual(0);
    let a = member("a");
    let mut p = SharePartition::new(0);
    for delivery in 1..=LIMITS.delivery_limit {
        let got = p.acquire(
            &a,
            &[data(0, 0), data(1, 1)],
            1,
            true,
            &LIMITS,
            clock.instant(),
        );
        assert_eq!(got, vec![acquired(0, 0, delivery)]);
        clock.advance(LIMITS.lock);
        let dead = p.expire(clock.instant(), &LIMITS);
        if delivery < LIMITS.delivery_limit {
            assert!(dead.is_empty());
        } else {
            assert_eq!(
                dead,
                vec![DeadLetter {
                    first: 0,
                    last: 0,
                    deliveries: 3,
                    why: Why::DeliveryLimit
                }]
            );
        }
    }
    assert_eq!(
        p.start(),
        1,
        "the poison record no longer blocks the partition"
    );
    // A lock expiring at the limit archives too.
    let got = p.acquire(&a, &[data(1, 1)], 1, true, &LIMITS, clock.instant());
    assert_eq!(got, vec![acquired(1, 1, 1)]);
    for _ in 1..LIMITS.delivery_limit {
        clock.advance(LIMITS.lock);
        assert!(p.expire(clock.instant(), &LIMITS).is_empty());
        p.acquire(&a, &[data(1, 1)], 1, true, &LIMITS, clock.instant());
    }
    clock.advance(LIMITS.lock);
    let dead = p.expire(clock.instant(), &LIMITS);
    assert_eq!(dead[0].why, Why::DeliveryLimit);
    assert_eq!(p.start(), 2);
}

#[test]
fn reject_is_a_dead_letter_and_gap_is_not() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 5)], 500, true, &LIMITS, now);
    let dead = p
        .acknowledge(
            "a",
            &[AckBatch {
                first: 0,
                last: 5,
                types: vec![
                    AckType::Accept,
                    AckType::Reject,
                    AckType::Reject,
                    AckType::Gap,
                    AckType::Accept,
                    AckType::Reject,
                ],
            }],
            &LIMITS,
            now,
        )
        .unwrap();
    assert_eq!(
        dead,
        vec![
            DeadLetter {
                first: 1,
                last: 2,
                deliveries: 1,
                why: Why::Rejected
            },
            DeadLetter {
                first: 5,
                last: 5,
                deliveries: 1,
                why: Why::Rejected
            }
        ]
    );
    assert_eq!(p.start(), 6);
}

#[test]
fn bad_acknowledgements_are_refused_whole() {
    let now = Clock::manual(0).instant();
    let (a, b) = (member("a"), member("b"));
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 4)], 500, true, &LIMITS, now);
    p.acquire(&b, &[data(5, 9)], 500, true, &LIMITS, now);
    let before = p.snapshot();
    let refused = |p: &mut SharePartition, batches: &[AckBatch]| {
        p.acknowledge("a", batches, &LIMITS, now).unwrap_err()
    };
    // Another member's records, with valid ones of its own first: nothing applied.
    let e = refused(
        &mut p,
        &[ack(0, 1, AckType::Accept), ack(5, 5, AckType::Accept)],
    );
    assert!(matches!(e, AckError::InvalidRecordState(m) if m.contains("another member")));
    // Never delivered, below the start after an accept.
    assert!(matches!(
        refused(&mut p, &[ack(20, 21, AckType::Accept)]),
        AckError::InvalidRecordState(_)
    ));
    // Backwards, overlapping, wrong type count.
    assert!(matches!(
        refused(&mut p, &[ack(3, 2, AckType::Accept)]),
        AckError::InvalidRequest(_)
    ));
    assert!(matches!(
        refused(
            &mut p,
            &[ack(0, 2, AckType::Accept), ack(2, 3, AckType::Accept)]
        ),
        AckError::InvalidRequest(_)
    ));
    assert!(matches!(
        refused(
            &mut p,
            &[AckBatch {
                first: 0,
                last: 2,
                types: vec![AckType::Accept, AckType::Accept]
            }]
        ),
        AckError::InvalidRequest(_)
    ));
    assert_eq!(p.snapshot(), before, "nothing was applied");
    p.acknowledge("a", &[ack(0, 4, AckType::Accept)], &LIMITS, now)
        .unwrap();
    assert!(matches!(
        refused(&mut p, &[ack(0, 0, AckType::Accept)]),
        AckError::InvalidRecordState(_)
    ));
    assert_eq!(AckType::from_wire(4, false), None);
    assert_eq!(AckType::from_wire(4, true), Some(AckType::Renew));
    assert_eq!(AckType::from_wire(5, true), None);
}

#[test]
fn control_batches_aborted_records_and_compaction_gaps_are_never_handed_out() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    let batches = [
        Batch {
            first: 0,
            last: 2,
            kind: BatchKind::Aborted,
        },
        Batch {
            first: 3,
            last: 3,
            kind: BatchKind::Control,
        },
        data(4, 5),
        // 6..=9 compacted away.
        data(10, 11),
    ];
    let got = p.acquire(&a, &batches, 500, true, &LIMITS, now);
    assert_eq!(got, vec![acquired(4, 5, 1), acquired(10, 11, 1)]);
    assert_eq!((p.start(), p.end()), (4, 12));
    p.acknowledge(
        "a",
        &[ack(4, 5, AckType::Accept), ack(10, 11, AckType::Accept)],
        &LIMITS,
        now,
    )
    .unwrap();
    assert_eq!(p.start(), 12);
    // The gap cannot be acknowledged: it was never handed out.
    assert!(p
        .acknowledge("a", &[ack(6, 6, AckType::Accept)], &LIMITS, now)
        .is_err());
}

#[test]
fn the_window_caps_records_in_flight() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let limits = Limits {
        max_in_flight: 10,
        ..LIMITS
    };
    let mut p = SharePartition::new(0);
    let batches: Vec<Batch> = (0..5).map(|i| data(i * 4, i * 4 + 3)).collect();
    // Whole batches: the third starts at 8 < 10 and is taken whole.
    assert_eq!(
        p.acquire(&a, &batches, 500, true, &limits, now),
        vec![acquired(0, 11, 1)]
    );
    assert!(!p.can_acquire(&limits));
    assert_eq!(
        p.acquire(&a, &batches[3..], 500, true, &limits, now),
        vec![]
    );
    p.acknowledge("a", &[ack(0, 7, AckType::Accept)], &limits, now)
        .unwrap();
    assert!(p.can_acquire(&limits));
    assert_eq!(
        p.acquire(&a, &batches[3..], 500, true, &limits, now),
        vec![acquired(12, 19, 1)]
    );
}

#[test]
fn max_records_bounds_a_fetch_by_whole_batches() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    let batches = [data(0, 2), data(3, 5), data(6, 8)];
    assert_eq!(
        p.acquire(&a, &batches, 4, true, &LIMITS, now),
        vec![acquired(0, 5, 1)]
    );
    assert_eq!(p.end(), 6);
}

#[test]
fn renew_extends_the_lock() {
    let clock = Clock::manual(0);
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 1)], 500, true, &LIMITS, clock.instant());
    clock.advance(Duration::from_secs(20));
    p.acknowledge("a", &[ack(0, 1, AckType::Renew)], &LIMITS, clock.instant())
        .unwrap();
    clock.advance(Duration::from_secs(20));
    assert!(p.expire(clock.instant(), &LIMITS).is_empty());
    assert_eq!(p.counts().acquired, 2, "renewed 20 s ago for 30 s");
    p.acknowledge("a", &[ack(0, 1, AckType::Accept)], &LIMITS, clock.instant())
        .unwrap();
    assert_eq!(p.start(), 2);
}

#[test]
fn a_snapshot_keeps_what_was_acknowledged_and_offers_the_acquired_again() {
    let now = Clock::manual(0).instant();
    let (a, b) = (member("a"), member("b"));
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 4), data(5, 9)], 500, true, &LIMITS, now);
    p.acknowledge(
        "a",
        &[ack(0, 1, AckType::Release), ack(5, 6, AckType::Accept)],
        &LIMITS,
        now,
    )
    .unwrap();
    let snap = p.snapshot();
    let mut q = SharePartition::restore(&snap);
    assert_eq!((q.start(), q.end()), (0, 10));
    assert_eq!(q.next_fetch_offset(), 0);
    let got = q.acquire(&b, &[data(0, 4), data(5, 9)], 500, true, &LIMITS, now);
    assert_eq!(
        got,
        vec![acquired(0, 4, 2), acquired(7, 9, 2)],
        "acquired records come back with their delivery counted; acknowledged ones never"
    );
    assert_eq!(q.counts().acknowledged, 2);
}

#[test]
fn the_start_follows_the_log_start() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 9)], 500, true, &LIMITS, now);
    p.truncate_below(5);
    assert_eq!((p.start(), p.end()), (5, 10));
    p.truncate_below(50);
    assert_eq!((p.start(), p.end()), (50, 50));
    p.reset(7);
    assert_eq!((p.start(), p.end(), p.next_fetch_offset()), (7, 7, 7));
}

#[test]
#[should_panic(expected = "invariant 13")]
fn the_invariant_check_fires_on_a_broken_state() {
    let mut p = SharePartition::new(0);
    p.runs.insert(
        0,
        Run {
            last: 3,
            state: State::Available,
            deliveries: 0,
        },
    );
    // The end not moved with the run: the runs overrun it.
    p.settle();
}

#[test]
fn with_a_dead_letter_topic_dead_letters_wait_for_their_write_and_survive_a_failover() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let limits = Limits {
        dead_letter_queue: true,
        delivery_limit: 2,
        ..LIMITS
    };
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 9)], 500, true, &limits, now);
    let dead = p
        .acknowledge(
            "a",
            &[
                ack(0, 1, AckType::Accept),
                ack(2, 2, AckType::Reject),
                ack(3, 9, AckType::Release),
            ],
            &limits,
            now,
        )
        .unwrap();
    assert_eq!(
        dead,
        vec![DeadLetter {
            first: 2,
            last: 2,
            deliveries: 1,
            why: Why::Rejected
        }]
    );
    assert_eq!(
        p.start(),
        2,
        "the start stops at the dead letter not yet written"
    );
    assert_eq!(p.counts().dead_lettering, 1);
    // Neither handed out again nor acknowledged.
    let again = p.acquire(&a, &[data(0, 9)], 500, true, &limits, now);
    assert_eq!(again.first().map(|x| x.first), Some(3));
    assert!(matches!(
        p.acknowledge("a", &[ack(2, 2, AckType::Accept)], &limits, now),
        Err(AckError::InvalidRecordState(_))
    ));
    // The second delivery of 3..=9 reaches the limit: released, they wait too.
    let dead = p
        .acknowledge("a", &[ack(3, 9, AckType::Release)], &limits, now)
        .unwrap();
    assert_eq!(dead[0].why, Why::DeliveryLimit);
    // A failover keeps both kinds, with their causes.
    let q = SharePartition::restore(&p.snapshot());
    assert_eq!(
        q.dead_lettering(),
        vec![
            DeadLetter {
                first: 2,
                last: 2,
                deliveries: 1,
                why: Why::Rejected
            },
            DeadLetter {
                first: 3,
                last: 9,
                deliveries: 2,
                why: Why::DeliveryLimit
            }
        ]
    );
    // Written: archived, and the start moves past them.
    assert_eq!(p.dead_lettered(2, 2), 1);
    assert_eq!(p.start(), 3);
    assert_eq!(p.dead_lettered(0, 100), 7, "clamped to what is in flight");
    assert_eq!(p.start(), 10);
    assert_eq!(p.dead_lettered(3, 9), 0, "once");
}

#[test]
fn without_a_dead_letter_topic_dead_letters_are_archived_at_once() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    p.acquire(&a, &[data(0, 0)], 500, true, &LIMITS, now);
    p.acknowledge("a", &[ack(0, 0, AckType::Reject)], &LIMITS, now)
        .unwrap();
    assert_eq!(p.start(), 1);
    assert!(p.dead_lettering().is_empty());
}

#[test]
fn record_limit_mode_never_passes_max_records_and_leaves_the_rest_for_later() {
    let now = Clock::manual(0).instant();
    let a = member("a");
    let mut p = SharePartition::new(0);
    // New records: a batch of 10 cut at 4.
    let got = p.acquire(&a, &[data(0, 9)], 4, false, &LIMITS, now);
    assert_eq!(
        got,
        vec![Acquired {
            first: 0,
            last: 3,
            deliveries: 1
        }]
    );
    assert_eq!(p.end(), 4);
    // The rest of the batch, read again from the middle.
    let got = p.acquire(&a, &[data(0, 9)], 4, false, &LIMITS, now);
    assert_eq!(
        got,
        vec![Acquired {
            first: 4,
            last: 7,
            deliveries: 1
        }]
    );
    // Records back in flight are cut too.
    p.acknowledge("a", &[ack(0, 7, AckType::Release)], &LIMITS, now)
        .unwrap();
    let got = p.acquire(&a, &[data(0, 9)], 3, false, &LIMITS, now);
    assert_eq!(
        got,
        vec![Acquired {
            first: 0,
            last: 2,
            deliveries: 2
        }]
    );
    // Batch-optimized keeps a batch whole past the count.
    let mut q = SharePartition::new(0);
    let got = q.acquire(&a, &[data(0, 9)], 4, true, &LIMITS, now);
    assert_eq!(
        got,
        vec![Acquired {
            first: 0,
            last: 9,
            deliveries: 1
        }]
    );
}
