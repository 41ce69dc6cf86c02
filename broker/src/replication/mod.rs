//! Replication between brokers, Kafka's way: followers fetch from the leader with the Fetch
//! API ([`fetcher`]); the leader tracks how far each follower has got, moves the high
//! watermark to what its ISR holds ([`crate::partition::leader`]) and proposes ISR changes
//! through the quorum, many partitions per entry ([`isr`]).
//!
//! An acknowledged `acks=all` write is one the high watermark passed: every ISR member holds
//! it, so it survives the loss of any ISR minority (docs/invariants.md 3) — a new leader
//! comes from the ISR ([`strata_metadata`]'s elections), and followers drop what it lacks
//! before fetching again.

pub mod fetcher;
pub mod isr;
mod leader_session;
pub mod moves;
