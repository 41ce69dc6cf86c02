//! `strata perf group`: how long a consumer group takes to settle.
//!
//! N members of one new group (each `strata perf group-member`, a child process running a
//! librdkafka consumer) subscribe to a topic of P partitions (default N + 1). Three phases are
//! timed, each until the group is *stable*: every live member reports the same assignment the
//! coordinator gives it in DescribeGroups (state Stable, exactly the live members), every
//! partition is owned by exactly one member, and every member owns one when there are enough
//! partitions.
//!
//! 1. **join** — from starting the N processes to stable (`join_ready_ms`: until the last
//!    one had subscribed, i.e. process start and librdkafka set-up);
//! 2. **add** — one more member (N → N + 1) started, to stable;
//! 3. **kill** — the oldest member killed with SIGKILL (no LeaveGroup), to stable with the N
//!    survivors, split into the wait for the coordinator to notice (`kill_session_wait_ms`:
//!    the group leaves Stable, seen by DescribeGroups polled every 10 ms; when a survivor's
//!    report comes first, the last poll that still saw Stable) and the rebalance after it.
//!
//! Times are taken when a member's report line arrives (its assignment changed), not when
//! the coordinator's state is polled; the poll only confirms the members' view. `*_rebalances`
//! counts the generations the group went through in each phase.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use rdkafka::consumer::BaseConsumer;

use super::member::AssignmentStrategy;
use super::member::{MemberState, Report};
use super::report::ms;
use super::setup::{ensure_topic, unique_group};
use crate::common::{emit, ConnectArgs};
use crate::group::{decode_assignment, describe_group};

/// How often the coordinator is polled while waiting for a member's death to be noticed.
const POLL: Duration = Duration::from_millis(10);
/// How long members get to leave the group and exit at the end before they are killed.
const SHUTDOWN: Duration = Duration::from_secs(30);

#[derive(Args, Debug)]
pub struct PerfGroupArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic the members subscribe to (created with --partitions partitions if missing).
    #[arg(short = 't', long)]
    pub topic: String,
    /// Members started at first (one more joins later, then one is killed).
    #[arg(short = 'm', long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub members: u32,
    /// Partitions of the topic when it is created (default: members + 1, so that every member
    /// owns one after the extra member joins).
    #[arg(short = 'p', long)]
    pub partitions: Option<i32>,
    /// Members' `session.timeout.ms`.
    #[arg(long, default_value_t = 6000, value_name = "MS")]
    pub session_timeout_ms: u64,
    /// Members' `heartbeat.interval.ms` (librdkafka's default is 3000).
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    pub heartbeat_interval_ms: u64,
    /// Members' `partition.assignment.strategy`.
    #[arg(long, value_enum, default_value = "range")]
    pub assignment_strategy: AssignmentStrategy,
    /// Give up when a phase has not reached a stable group after this long.
    #[arg(long, default_value_t = 300_000, value_name = "MS")]
    pub phase_timeout_ms: u64,
    /// Print every member report and phase event to stderr, with milliseconds since start.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// A report line from member `index`, when it arrived; `None` when its stdout closed.
struct Event {
    at: Instant,
    index: usize,
    report: Option<Report>,
}

struct Slot {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// Until it was killed or exited.
    alive: bool,
    ready_at: Option<Instant>,
    state: Option<MemberState>,
}

/// The member processes and what they last reported.
struct Fleet {
    exe: OsString,
    base_args: Vec<OsString>,
    slots: Vec<Slot>,
    events_tx: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
    /// When a live member's assigned partitions last changed.
    last_change: Instant,
    /// `--verbose`: reports are printed with the time since `origin`.
    verbose: bool,
    origin: Instant,
}

impl Fleet {
    fn new(args: &PerfGroupArgs, group: &str) -> anyhow::Result<Fleet> {
        let exe = std::env::current_exe().context("locating the strata binary")?;
        let conn = &args.conn;
        let mut base: Vec<String> = vec![
            "perf".into(),
            "group-member".into(),
            "--bootstrap-server".into(),
            conn.bootstrap_server.clone(),
            "--request-timeout-ms".into(),
            conn.request_timeout_ms.to_string(),
            "--group".into(),
            group.into(),
            "--topic".into(),
            args.topic.clone(),
            "--session-timeout-ms".into(),
            args.session_timeout_ms.to_string(),
            "--heartbeat-interval-ms".into(),
            args.heartbeat_interval_ms.to_string(),
            "--assignment-strategy".into(),
            args.assignment_strategy.as_config().into(),
        ];
        for (k, v) in &conn.properties {
            base.push("-X".into());
            base.push(format!("{k}={v}"));
        }
        let (events_tx, events) = mpsc::channel();
        Ok(Fleet {
            exe: exe.into_os_string(),
            base_args: base.into_iter().map(OsString::from).collect(),
            slots: Vec::new(),
            events_tx,
            events,
            last_change: Instant::now(),
            verbose: args.verbose,
            origin: Instant::now(),
        })
    }

    /// Starts one more member; returns its index.
    fn spawn(&mut self) -> anyhow::Result<usize> {
        let index = self.slots.len();
        let mut child = Command::new(&self.exe)
            .args(&self.base_args)
            .arg("--index")
            .arg(index.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting member {index}"))?;
        let stdout = child.stdout.take().context("member stdout")?;
        let stdin = child.stdin.take();
        let tx = self.events_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match Report::parse(&line) {
                    Some(report) => {
                        let event = Event {
                            at: Instant::now(),
                            index,
                            report: Some(report),
                        };
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                    None => eprintln!("member {index}: {line}"),
                }
            }
            let _ = tx.send(Event {
                at: Instant::now(),
                index,
                report: None,
            });
        });
        self.slots.push(Slot {
            child: Some(child),
            stdin,
            alive: true,
            ready_at: None,
            state: None,
        });
        Ok(index)
    }

    /// SIGKILL: the member neither leaves the group nor closes its connections cleanly.
    fn kill(&mut self, index: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[index];
        slot.alive = false;
        slot.stdin = None;
        if let Some(mut child) = slot.child.take() {
            child
                .kill()
                .with_context(|| format!("killing member {index}"))?;
            let _ = child.wait();
        }
        Ok(())
    }

    /// Applies the reports that arrive within `wait`. Returns the arrival time of the first
    /// assignment change of a live member, if any.
    fn pump(&mut self, wait: Duration) -> anyhow::Result<Option<Instant>> {
        let mut first_change = None;
        let mut next = self.events.recv_timeout(wait).ok();
        while let Some(event) = next {
            if let (true, Some(report)) = (self.verbose, &event.report) {
                self.trace(event.at, format_args!("member {}: {report}", event.index));
            }
            let slot = &mut self.slots[event.index];
            match event.report {
                Some(Report::Ready { .. }) => slot.ready_at = Some(event.at),
                Some(Report::State(state)) => {
                    let moved = slot
                        .state
                        .as_ref()
                        .is_none_or(|old| old.partitions != state.partitions);
                    slot.state = Some(state);
                    if moved && slot.alive {
                        self.last_change = event.at;
                        first_change.get_or_insert(event.at);
                    }
                }
                None if slot.alive => {
                    let status = slot.child.as_mut().and_then(|c| c.wait().ok());
                    slot.alive = false;
                    bail!(
                        "member {} exited unexpectedly ({})",
                        event.index,
                        status.map_or("unknown status".to_string(), |s| s.to_string())
                    );
                }
                None => {}
            }
            next = self.events.try_recv().ok();
        }
        Ok(first_change)
    }

    /// `--verbose` output: an event at `at`.
    fn trace(&self, at: Instant, what: std::fmt::Arguments<'_>) {
        if self.verbose {
            let ms = at.saturating_duration_since(self.origin).as_secs_f64() * 1000.0;
            eprintln!("perf group: {ms:>10.1} ms  {what}");
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots.iter().enumerate().filter(|(_, s)| s.alive)
    }

    fn live_states(&self) -> Vec<Option<&MemberState>> {
        self.live().map(|(_, s)| s.state.as_ref()).collect()
    }

    /// Latest generation any live member reported.
    fn generation(&self) -> i32 {
        self.live()
            .filter_map(|(_, s)| s.state.as_ref().map(|st| st.generation))
            .max()
            .unwrap_or(-1)
    }

    fn summary(&self, partitions: i32) -> String {
        let live = self.live().count();
        let ready = self.live().filter(|(_, s)| s.ready_at.is_some()).count();
        let holding = self
            .live()
            .filter(|(_, s)| s.state.as_ref().is_some_and(|st| !st.partitions.is_empty()))
            .count();
        let owned: usize = self
            .live()
            .filter_map(|(_, s)| s.state.as_ref().map(|st| st.partitions.len()))
            .sum();
        format!(
            "subscribed={ready}/{live} holding={holding}/{live} owned={owned}/{partitions} \
             generation={}",
            self.generation()
        )
    }

    fn describe_members(&self) -> String {
        self.live()
            .map(|(i, s)| match &s.state {
                Some(st) => format!(
                    "  member {i}: generation {} id {} partitions {:?}",
                    st.generation, st.member_id, st.partitions
                ),
                None if s.ready_at.is_some() => format!("  member {i}: subscribed, no report"),
                None => format!("  member {i}: not started"),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Closes every member's stdin so that it leaves the group and exits; kills those still
    /// running after [`SHUTDOWN`].
    fn shutdown(&mut self) {
        for slot in &mut self.slots {
            slot.stdin = None;
        }
        let deadline = Instant::now() + SHUTDOWN;
        for slot in &mut self.slots {
            let Some(mut child) = slot.child.take() else {
                continue;
            };
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            slot.alive = false;
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The members' common view when it is a stable one: every live member has reported a member
/// id (all distinct), each of `partitions` partitions is owned by exactly one of them, and
/// each owns at least one when there are as many partitions as members. Returns each member
/// id's partitions.
fn members_agree(
    states: &[Option<&MemberState>],
    partitions: i32,
) -> Option<BTreeMap<String, Vec<i32>>> {
    let mut owners = vec![0u32; usize::try_from(partitions).ok()?];
    let mut by_member = BTreeMap::new();
    for state in states {
        let state = (*state)?;
        if state.member_id.is_empty() || state.generation < 0 {
            return None;
        }
        if state.partitions.is_empty() && partitions as usize >= states.len() {
            return None;
        }
        for p in &state.partitions {
            *owners.get_mut(usize::try_from(*p).ok()?)? += 1;
        }
        if by_member
            .insert(state.member_id.clone(), state.partitions.clone())
            .is_some()
        {
            return None;
        }
    }
    owners.iter().all(|n| *n == 1).then_some(by_member)
}

/// The coordinator's view: its state and, when Stable, each member's partitions of `topic`.
#[derive(Debug, PartialEq, Eq)]
struct CoordinatorView {
    state: String,
    members: BTreeMap<String, Vec<i32>>,
}

fn coordinator_view(
    conn: &ConnectArgs,
    client: &BaseConsumer,
    group: &str,
    topic: &str,
) -> anyhow::Result<CoordinatorView> {
    let Some(snapshot) = describe_group(conn, client, group)? else {
        return Ok(CoordinatorView {
            state: "Unknown".into(),
            members: BTreeMap::new(),
        });
    };
    let mut members = BTreeMap::new();
    for m in &snapshot.members {
        let mut partitions: Vec<i32> = match m.assignment.as_deref() {
            None | Some([]) => vec![],
            Some(bytes) => decode_assignment(bytes)
                .map_err(|e| anyhow!("member {}: undecodable assignment: {e}", m.id))?
                .partitions
                .into_iter()
                .filter(|(t, _)| t == topic)
                .flat_map(|(_, ps)| ps)
                .collect(),
        };
        partitions.sort_unstable();
        members.insert(m.id.clone(), partitions);
    }
    Ok(CoordinatorView {
        state: snapshot.state,
        members,
    })
}

/// What one phase measured.
struct Settled {
    /// When the group became stable.
    at: Instant,
    /// Generation then.
    generation: i32,
}

struct Run<'a> {
    args: &'a PerfGroupArgs,
    group: String,
    partitions: i32,
    fleet: Fleet,
    admin: BaseConsumer,
}

impl Run<'_> {
    fn view(&self) -> anyhow::Result<CoordinatorView> {
        coordinator_view(&self.args.conn, &self.admin, &self.group, &self.args.topic)
    }

    fn phase_deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.args.phase_timeout_ms)
    }

    fn timed_out(&self, phase: &str, since: Instant) -> anyhow::Error {
        let coordinator = self
            .view()
            .map(|v| v.state)
            .unwrap_or_else(|e| format!("unknown ({e})"));
        anyhow!(
            "{phase}: no stable group after {:.1} s (coordinator: {coordinator}; {}):\n{}",
            since.elapsed().as_secs_f64(),
            self.fleet.summary(self.partitions),
            self.fleet.describe_members()
        )
    }

    fn progress(&self, phase: &str, since: Instant) {
        let coordinator = self.view().map(|v| v.state).unwrap_or_else(|_| "?".into());
        eprintln!(
            "perf group: {phase} {:.1}s {} coordinator={coordinator}",
            since.elapsed().as_secs_f64(),
            self.fleet.summary(self.partitions)
        );
    }

    /// Waits until the live members and the coordinator agree on a stable assignment.
    fn wait_stable(&mut self, phase: &str, since: Instant) -> anyhow::Result<Settled> {
        let deadline = self.phase_deadline();
        let mut next_progress = Instant::now() + Duration::from_secs(1);
        loop {
            self.fleet.pump(POLL)?;
            if let Some(expected) = members_agree(&self.fleet.live_states(), self.partitions) {
                let view = self.view()?;
                if view.state == "Stable" && view.members == expected {
                    let at = if self.fleet.last_change > since {
                        self.fleet.last_change
                    } else {
                        Instant::now()
                    };
                    return Ok(Settled {
                        at,
                        generation: self.fleet.generation(),
                    });
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out(phase, since));
            }
            if now >= next_progress {
                self.progress(phase, since);
                next_progress = now + Duration::from_secs(1);
            }
        }
    }

    /// Waits until the coordinator leaves Stable after a member's death; returns when.
    ///
    /// A whole rebalance can fall between two polls, so a survivor's report of its new
    /// assignment may arrive before any poll saw the group leave Stable. The coordinator
    /// noticed after the last poll that still saw Stable, and that poll's start is the answer
    /// then: the session wait is never over-counted, and the rebalance after it is never
    /// measured as zero when the report is its only witness.
    fn wait_noticed(&mut self, phase: &str, since: Instant) -> anyhow::Result<Instant> {
        let deadline = self.phase_deadline();
        let mut next_progress = Instant::now() + Duration::from_secs(1);
        let mut last_stable = since;
        loop {
            if self.fleet.pump(Duration::ZERO)?.is_some() {
                return Ok(last_stable);
            }
            let polled = Instant::now();
            if self.view()?.state != "Stable" {
                return Ok(polled);
            }
            last_stable = polled;
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out(phase, since));
            }
            if now >= next_progress {
                eprintln!(
                    "perf group: {phase} {:.1}s waiting for the coordinator to expire the member",
                    since.elapsed().as_secs_f64()
                );
                next_progress = now + Duration::from_secs(1);
            }
            std::thread::sleep(POLL);
        }
    }
}

/// A librdkafka property as the members run with it: a `-X` override, else the flag's value.
fn effective(conn: &ConnectArgs, key: &str, flag: u64) -> String {
    conn.property(key)
        .map_or_else(|| flag.to_string(), str::to_string)
}

pub(super) fn run(args: PerfGroupArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let partitions = ensure_topic(conn, &args.topic, args.partitions, args.members as i32 + 1)?;
    let group = unique_group("strata-perf-group");
    eprintln!(
        "perf group: group {group}, {} members, topic {} with {partitions} partitions, {}",
        args.members,
        args.topic,
        args.assignment_strategy.as_config()
    );
    // No group.id: DescribeGroups only, this client never joins.
    let admin: BaseConsumer = conn
        .client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating the DescribeGroups client")?;
    let mut run = Run {
        args: &args,
        fleet: Fleet::new(&args, &group)?,
        group,
        partitions,
        admin,
    };

    // 1. N members join a new group.
    let join_start = Instant::now();
    run.fleet.trace(
        join_start,
        format_args!("join: starting {} members", args.members),
    );
    for _ in 0..args.members {
        run.fleet.spawn()?;
    }
    let joined = run.wait_stable("join", join_start)?;
    let join_ready = run
        .fleet
        .slots
        .iter()
        .filter_map(|s| s.ready_at)
        .max()
        .unwrap_or(joined.at);
    eprintln!(
        "perf group: join stable after {} ms (generation {})",
        ms(joined.at - join_start),
        joined.generation
    );

    // 2. One more member joins the stable group.
    let add_start = Instant::now();
    run.fleet
        .trace(add_start, format_args!("add: starting one more member"));
    let added = run.fleet.spawn()?;
    let add = run.wait_stable("add", add_start)?;
    let add_ready = run.fleet.slots[added].ready_at.unwrap_or(add.at);
    eprintln!(
        "perf group: add stable after {} ms (generation {})",
        ms(add.at - add_start),
        add.generation
    );

    // 3. The oldest member dies without leaving.
    let victim = run
        .fleet
        .live()
        .map(|(i, _)| i)
        .next()
        .context("no live member to kill")?;
    let kill_start = Instant::now();
    run.fleet
        .trace(kill_start, format_args!("kill: SIGKILL to member {victim}"));
    run.fleet.kill(victim)?;
    let noticed = run.wait_noticed("kill", kill_start)?;
    run.fleet.trace(
        noticed,
        format_args!("kill: the coordinator has noticed (group left Stable)"),
    );
    let kill = run.wait_stable("kill", kill_start)?;
    eprintln!(
        "perf group: kill stable after {} ms (generation {})",
        ms(kill.at - kill_start),
        kill.generation
    );

    run.fleet.shutdown();
    emit(format_args!(
        "group members={} partitions={partitions} strategy={} session_timeout_ms={} \
         heartbeat_interval_ms={} join_ms={} join_ready_ms={} join_rebalances={} add_ms={} \
         add_ready_ms={} add_rebalances={} kill_ms={} kill_session_wait_ms={} \
         kill_rebalance_ms={} kill_rebalances={} poll_ms={}",
        args.members,
        args.assignment_strategy.as_config(),
        effective(conn, "session.timeout.ms", args.session_timeout_ms),
        effective(conn, "heartbeat.interval.ms", args.heartbeat_interval_ms),
        ms(joined.at - join_start),
        ms(join_ready.saturating_duration_since(join_start)),
        joined.generation,
        ms(add.at - add_start),
        ms(add_ready.saturating_duration_since(add_start)),
        add.generation - joined.generation,
        ms(kill.at - kill_start),
        ms(noticed.saturating_duration_since(kill_start)),
        ms(kill.at.saturating_duration_since(noticed)),
        kill.generation - add.generation,
        POLL.as_millis(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(generation: i32, id: &str, partitions: &[i32]) -> MemberState {
        MemberState {
            generation,
            member_id: id.into(),
            partitions: partitions.to_vec(),
        }
    }

    #[test]
    fn members_agree_only_on_a_full_exclusive_assignment() {
        let a = st(2, "a", &[0, 1]);
        let b = st(2, "b", &[2]);
        let agreed = members_agree(&[Some(&a), Some(&b)], 3).unwrap();
        assert_eq!(agreed.get("a"), Some(&vec![0, 1]));
        assert_eq!(agreed.get("b"), Some(&vec![2]));

        // A partition missing (revoked, not yet reassigned) or owned twice.
        assert!(members_agree(&[Some(&a), Some(&st(2, "b", &[]))], 3).is_none());
        assert!(members_agree(&[Some(&a), Some(&st(2, "b", &[1, 2]))], 3).is_none());
        // A member that has not reported, has no id yet, or repeats another's id.
        assert!(members_agree(&[Some(&a), None], 3).is_none());
        assert!(members_agree(&[Some(&a), Some(&st(-1, "", &[2]))], 3).is_none());
        assert!(members_agree(&[Some(&a), Some(&st(2, "a", &[2]))], 3).is_none());
        // A partition the topic does not have.
        assert!(members_agree(&[Some(&a), Some(&st(2, "b", &[2, 3]))], 3).is_none());
    }

    #[test]
    fn members_without_partitions_are_fine_only_when_partitions_are_scarce() {
        let a = st(1, "a", &[0]);
        let idle = st(1, "b", &[]);
        assert!(members_agree(&[Some(&a), Some(&idle)], 1).is_some());
        assert!(members_agree(&[Some(&a), Some(&idle)], 2).is_none());
    }

    #[test]
    fn effective_properties_prefer_overrides() {
        let mut conn = ConnectArgs {
            bootstrap_server: "h:1".into(),
            properties: vec![],
            request_timeout_ms: 1000,
        };
        assert_eq!(effective(&conn, "session.timeout.ms", 6000), "6000");
        conn.properties
            .push(("session.timeout.ms".into(), "10000".into()));
        assert_eq!(effective(&conn, "session.timeout.ms", 6000), "10000");
    }
}
