// The console: pages over the admin API, live-updating (each page polls its endpoints), with
// real links (`<a href>`) the broker also serves directly, so every page can be bookmarked.
import { render } from "preact";
import uPlot from "uplot";
import { useEffect, useRef, useState } from "preact/hooks";
import {
  act,
  ApiError,
  Field,
  get,
  GroupDetail,
  GroupPoint,
  GroupRow,
  Members,
  History,
  HistoryPoint,
  Messages,
  Move,
  Quorum,
  Overview,
  OpenTxn,
  Page,
  Security,
  SharePartition,
  Transactions,
  TopicDetail,
  TopicRow,
  Unanswered,
} from "./api";

const REFRESH_MS = 5000;
const PAGE = 50;

/// Polls `path` every REFRESH_MS; keeps the last good answer on screen while a later one fails.
function usePoll<T>(path: string): { data?: T; error?: string; at?: Date } {
  const [state, setState] = useState<{ data?: T; error?: string; at?: Date }>({});
  useEffect(() => {
    let live = true;
    const load = async () => {
      try {
        const data = await get<T>(path);
        if (live) setState({ data, at: new Date() });
      } catch (e) {
        const error = e instanceof ApiError ? e.message : String(e);
        if (live) setState((s) => ({ ...s, error }));
      }
    };
    load();
    const timer = setInterval(load, REFRESH_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [path]);
  return state;
}

function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function seconds(s: number): string {
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(0)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function Failure({ error }: { error?: string }) {
  return error ? <p class="error" role="alert">{error}</p> : null;
}

/// Brokers that did not give their part of a view: what is missing, in words.
function Missing({ brokers }: { brokers?: Unanswered[] }) {
  if (!brokers || brokers.length === 0) return null;
  return (
    <p class="error" role="alert">
      {brokers.map((b) => `Broker ${b.broker} did not answer (${b.error}): its figures are missing. `)}
    </p>
  );
}

function Stat({ label, value, warn }: { label: string; value: number | string; warn?: boolean }) {
  return (
    <div class={warn ? "stat warn" : "stat"}>
      <span class="value">{value}</span>
      <span class="label">{label}</span>
    </div>
  );
}

function QuorumTable({ q }: { q: Quorum }) {
  const now = Date.now();
  return (
    <table id="quorum">
      <thead>
        <tr><th>node</th><th>role</th><th class="num">log end</th><th class="num">behind (entries)</th><th class="num">last contact</th></tr>
      </thead>
      <tbody>
        {q.nodes.map((n) => (
          <tr key={n.id}>
            <td>{n.id}</td>
            <td>{n.id === q.leader ? "leader" : n.voter ? "voter" : "observer"}</td>
            <td class="num">{n.log_end < 0 ? "—" : n.log_end}</td>
            <td class="num">{n.behind ?? "—"}</td>
            <td class="num">{n.last_fetch_ms < 0 ? "—" : `${seconds(Math.max(0, now - n.last_fetch_ms) / 1000)} ago`}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/// Moves in progress: how far each new replica has come, and when it should be done at the
/// pace seen between the last two polls.
function MovesTable({ moves }: { moves: Move[] }) {
  const seen = useRef(new Map<string, { end: number; at: number }>());
  const now = Date.now();
  const rows = moves.flatMap((m) =>
    (m.adding.length ? m.adding : [null]).map((r) => {
      const key = `${m.topic}/${m.partition}/${r}`;
      const end = r === null || !m.log_ends ? undefined : m.log_ends[String(r)];
      const start = m.log_start ?? 0;
      const hw = m.high_watermark;
      const pct = end === undefined || hw === null ? undefined : hw <= start ? 100 : Math.max(0, Math.min(100, (100 * (Math.max(end, start) - start)) / (hw - start)));
      let eta: string = "—";
      const before = seen.current.get(key);
      if (end !== undefined && hw !== null && before && end > before.end && now > before.at) {
        const rate = (end - before.end) / ((now - before.at) / 1000);
        eta = seconds(Math.max(0, hw - end) / rate);
      }
      if (end !== undefined && (!before || before.end !== end)) seen.current.set(key, { end, at: now });
      return { m, r, end, pct, eta, key };
    }),
  );
  return (
    <table id="moves">
      <thead>
        <tr><th>partition</th><th>replicas</th><th>new replica</th><th>progress</th><th class="num">offsets</th><th class="num">done in</th></tr>
      </thead>
      <tbody>
        {rows.map(({ m, r, end, pct, eta, key }) => (
          <tr key={key}>
            <td><a href={`/topics/${encodeURIComponent(m.topic)}`}>{m.topic}</a>-{m.partition}</td>
            <td>{m.replicas.join(", ")}{m.removing.length > 0 && <span class="muted"> (leaving: {m.removing.join(", ")})</span>}</td>
            <td>{r ?? "—"}</td>
            <td>{pct === undefined ? "—" : <progress max={100} value={pct} aria-label={`${pct.toFixed(0)}%`} />} {pct !== undefined && `${pct.toFixed(0)}%`}</td>
            <td class="num">{end === undefined ? "—" : `${end} / ${m.high_watermark}`}</td>
            <td class="num">{eta}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/// The outcome of the last change made on a page, in words.
function useAction(): [(run: () => Promise<string>) => Promise<boolean>, { ok?: string; error?: string }] {
  const [state, setState] = useState<{ ok?: string; error?: string }>({});
  const run = async (f: () => Promise<string>) => {
    try {
      setState({ ok: await f() });
      return true;
    } catch (e) {
      setState({ error: e instanceof ApiError ? e.message : String(e) });
      return false;
    }
  };
  return [run, state];
}

function Outcome({ state }: { state: { ok?: string; error?: string } }) {
  if (state.error) return <p class="error" role="alert">{state.error}</p>;
  if (state.ok) return <p class="ok" role="status">{state.ok}</p>;
  return null;
}

function CreateTopic() {
  const [name, setName] = useState("");
  const [partitions, setPartitions] = useState("1");
  const [replication, setReplication] = useState("");
  const [run, state] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    const body: Record<string, unknown> = { name: name.trim(), partitions: Number(partitions) };
    if (replication.trim() !== "") body.replication_factor = Number(replication);
    if (await run(() => act("POST", "/v1/topics", body))) setName("");
  };
  return (
    <form id="create-topic" class="find" onSubmit={submit}>
      <label>New topic <input id="new-topic-name" value={name} required onInput={(e) => setName(e.currentTarget.value)} /></label>
      <label>Partitions <input id="new-topic-partitions" type="number" min={1} value={partitions} onInput={(e) => setPartitions(e.currentTarget.value)} /></label>
      <label>Replicas <input id="new-topic-replicas" type="number" min={1} placeholder="default" value={replication} onInput={(e) => setReplication(e.currentTarget.value)} /></label>
      <button type="submit">Create</button>
      <Outcome state={state} />
    </form>
  );
}

function OverviewPage() {
  const o = usePoll<Overview>("/v1/overview");
  const [query, setQuery] = useState("");
  const [offset, setOffset] = useState(0);
  const [topicSort, setTopicSort] = useState("name");
  const [groupSort, setGroupSort] = useState("name");
  const q = encodeURIComponent(query);
  const topics = usePoll<Page<TopicRow>>(`/v1/topics?q=${q}&offset=${offset}&limit=${PAGE}&sort=${topicSort}`);
  const groups = usePoll<Page<GroupRow>>(`/v1/groups?q=${q}&limit=${PAGE}&sort=${groupSort}`);
  const d = o.data;
  return (
    <>
      <Failure error={o.error} />
      <Missing brokers={d?.unanswered} />
      <section aria-label="cluster">
        <h1>Cluster</h1>
        {d ? (
          <div class="stats">
            <Stat label="brokers" value={d.brokers.length} />
            <Stat label="controller" value={d.controller ?? "none"} warn={d.controller === null} />
            <Stat label="topics" value={d.topics} />
            <Stat label="partitions" value={d.partitions} />
            <Stat label="offline" value={d.offline} warn={d.offline > 0} />
            <Stat label="under-replicated" value={d.under_replicated} warn={d.under_replicated > 0} />
            <Stat label="moving" value={d.moving} />
            <Stat label="groups" value={d.groups} />
          </div>
        ) : (
          <p class="muted">Loading…</p>
        )}
        {d && (
          <table id="brokers">
            <thead>
              <tr><th>broker</th><th>address</th><th>rack</th><th>state</th><th>role</th></tr>
            </thead>
            <tbody>
              {d.brokers.map((b) => (
                <tr key={b.id}>
                  <td><a href={`/brokers/${b.id}`}>{b.id}</a></td>
                  <td>{b.host}:{b.port}</td>
                  <td>{b.rack ?? "—"}</td>
                  <td>{b.state}</td>
                  <td>{[b.id === d.controller ? "controller" : "", d.voters.includes(b.id) ? "voter" : ""].filter(Boolean).join(", ") || "—"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {d && (
          <>
            <h2>Metadata quorum</h2>
            {d.quorum ? <QuorumTable q={d.quorum} /> : <p class="error" role="alert">No quorum leader answered within 2 s.</p>}
          </>
        )}
        {d && d.moves.length > 0 && (
          <>
            <h2>Moves in progress <span class="muted">({d.moving})</span></h2>
            <MovesTable moves={d.moves} />
          </>
        )}
      </section>
      <label class="filter">
        Filter topics and groups{" "}
        <input type="search" value={query} onInput={(e) => { setQuery(e.currentTarget.value); setOffset(0); }} />
      </label>
      <section aria-label="topics">
        <h2>Topics {topics.data && <span class="muted">({topics.data.total})</span>}</h2>
        <label class="filter">
          Sort by{" "}
          <select id="topic-sort" value={topicSort} onChange={(e) => { setTopicSort(e.currentTarget.value); setOffset(0); }}>
            <option value="name">name</option>
            <option value="size">size (local + remote)</option>
            <option value="partitions">partitions</option>
            <option value="throughput">throughput (bytes in)</option>
          </select>
        </label>
        {d?.actions && <CreateTopic />}
        <Failure error={topics.error} />
        <Missing brokers={topics.data?.unanswered} />
        <table id="topics">
          <thead>
            <tr><th>topic</th><th class="num">partitions</th><th class="num">replicas</th><th class="num">local</th><th class="num">remote</th><th class="num">bytes in</th><th>health</th></tr>
          </thead>
          <tbody>
            {topics.data?.items.map((t) => (
              <tr key={t.name}>
                <td><a href={`/topics/${encodeURIComponent(t.name)}`}>{t.name}</a></td>
                <td class="num">{t.partitions}</td>
                <td class="num">{t.replication_factor}</td>
                <td class="num">{t.local_bytes === null ? "—" : bytes(t.local_bytes)}</td>
                <td class="num">{bytes(t.remote_bytes)}</td>
                <td class="num">{perSecond(t.bytes_in_per_s ?? 0)}</td>
                <td>{t.offline ? `${t.offline} offline` : t.under_replicated ? `${t.under_replicated} under-replicated` : "ok"}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {topics.data && topics.data.total > PAGE && (
          <nav class="pager">
            <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>previous</button>
            <span>{offset + 1}–{Math.min(offset + PAGE, topics.data.total)} of {topics.data.total}</span>
            <button disabled={offset + PAGE >= topics.data.total} onClick={() => setOffset(offset + PAGE)}>next</button>
          </nav>
        )}
      </section>
      <section aria-label="groups">
        <h2>Consumer and share groups {groups.data && <span class="muted">({groups.data.total})</span>}</h2>
        <label class="filter">
          Sort by{" "}
          <select id="group-sort" value={groupSort} onChange={(e) => setGroupSort(e.currentTarget.value)}>
            <option value="name">name</option>
            <option value="lag">lag (records)</option>
            <option value="lag_time">lag (time)</option>
          </select>
        </label>
        <Failure error={groups.error} />
        <table id="groups">
          <thead>
            <tr><th>group</th><th>kind</th><th class="num">partitions</th><th class="num">lag (records)</th><th class="num">lag (time)</th><th>risk</th></tr>
          </thead>
          <tbody>
            {groups.data?.items.map((g) => (
              <tr key={g.group}>
                <td><a href={`/groups/${encodeURIComponent(g.group)}`}>{g.group}</a></td>
                <td>{g.kind ?? "—"}</td>
                <td class="num">{g.partitions}</td>
                <td class="num">{g.lag_records}</td>
                <td class="num">{seconds(g.lag_seconds)}</td>
                <td>{g.retention_risk ? "retention risk" : "—"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </>
  );
}

function GroupPage({ name }: { name: string }) {
  const g = usePoll<GroupDetail>(`/v1/groups/${encodeURIComponent(name)}`);
  const parts = g.data?.partitions ?? [];
  const total = parts.reduce((n, p) => n + p.lag_records, 0);
  const oldest = parts.reduce((s, p) => Math.max(s, p.lag_seconds), 0);
  const trend = parts.reduce((t, p) => t + p.trend_records_per_second, 0);
  const history: GroupPoint[] = g.data?.history ?? [];
  return (
    <section aria-label="group">
      <p><a href="/">← overview</a></p>
      <h1>Group {name}</h1>
      <Failure error={g.error} />
      <Missing brokers={g.data?.unanswered} />
      {g.data && (
        <div class="stats" id="group-totals">
          <Stat label="lag (records)" value={total} />
          <Stat label="lag (time)" value={seconds(oldest)} />
          <Stat label="trend (records/s)" value={(Math.abs(trend) < 0.05 ? 0 : trend).toFixed(1)} warn={trend > 0} />
          <Stat label={trend < 0 ? "drained in" : "draining"} value={trend < 0 && total > 0 ? seconds(total / -trend) : trend > 0 ? "no: falling behind" : "—"} />
        </div>
      )}
      {g.data && <MembersView m={g.data.members} />}
      {g.data && g.data.share_partitions.length > 0 && <ShareTable parts={g.data.share_partitions} dlq={g.data.dead_letter_topic} />}
      {history.length > 0 && (
        <div class="charts" id="lag-charts">
          <Chart title="Lag over the last hour" unit="records" points={history} format={(v) => (Number.isInteger(v) ? String(v) : v.toFixed(1))} lines={[
            { label: "records", value: (p) => p.lag_records, color: "#1f5fbf" },
          ]} />
          <Chart title="Oldest unread record's age" unit="time" points={history} format={seconds} lines={[
            { label: "age", value: (p) => p.lag_seconds, color: "#c2571a" },
          ]} />
        </div>
      )}
      <table id="group-partitions">
        <thead>
          <tr><th>topic</th><th class="num">partition</th><th class="num">committed</th><th class="num">lag (records)</th><th class="num">lag (time)</th><th class="num">trend (records/s)</th><th>drain</th><th>risk</th></tr>
        </thead>
        <tbody>
          {g.data?.partitions.map((p) => (
            <tr key={`${p.topic}-${p.partition}`}>
              <td><a href={`/topics/${encodeURIComponent(p.topic)}`}>{p.topic}</a></td>
              <td class="num">{p.partition}</td>
              <td class="num">{p.committed}</td>
              <td class="num">{p.lag_records}</td>
              <td class="num">{seconds(p.lag_seconds)}</td>
              <td class="num">{p.trend_records_per_second.toFixed(1)}</td>
              <td>{p.drain_seconds === null ? "—" : seconds(p.drain_seconds)}</td>
              <td>{p.retention_risk ? "retention risk" : "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {g.data?.actions && <ResetOffsets group={name} topics={[...new Set(parts.map((p) => p.topic))]} />}
    </section>
  );
}

/// A group's members and what each is assigned, as its coordinator describes them.
function MembersView({ m }: { m: Members | null }) {
  if (m === null) return <p class="muted">The group's coordinator did not describe it (see above).</p>;
  if (m.refused) return <p class="muted">Members: {m.refused}.</p>;
  const members = m.members ?? [];
  return (
    <>
      <h2>Members <span class="muted">({m.kind} group, {m.state}; {members.length})</span></h2>
      {members.length === 0 ? (
        <p class="muted">No members: nothing consumes for this group now.</p>
      ) : (
        <table id="group-members">
          <thead><tr><th>member</th><th>client</th><th>host</th><th>assigned</th></tr></thead>
          <tbody>
            {members.map((x) => (
              <tr key={x.member_id}>
                <td>{x.instance_id ? `${x.instance_id} (${x.member_id})` : x.member_id}</td>
                <td>{x.client_id}</td>
                <td>{x.host}</td>
                <td class="value">{x.assignment.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; ") || "—"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

/// A share group's partitions: records in flight by state, and where its dead letters go.
function ShareTable({ parts, dlq }: { parts: SharePartition[]; dlq: string | null }) {
  return (
    <>
      <h2>Share partitions</h2>
      <p>
        Dead letters go to{" "}
        {dlq ? <a id="dead-letter-topic" href={`/topics/${encodeURIComponent(dlq)}`}>{dlq}</a> : <span class="muted">no topic: records past their delivery limit are archived</span>}.
      </p>
      <table id="share-partitions">
        <thead>
          <tr><th>topic</th><th class="num">partition</th><th class="num">start</th><th class="num">end</th><th class="num">available</th><th class="num">acquired</th><th class="num">acknowledged</th><th class="num">archived</th><th class="num">dead-lettering</th></tr>
        </thead>
        <tbody>
          {parts.map((p) => (
            <tr key={`${p.topic}-${p.partition}`}>
              <td><a href={`/topics/${encodeURIComponent(p.topic)}`}>{p.topic}</a></td>
              <td class="num">{p.partition}</td>
              <td class="num">{p.start}</td>
              <td class="num">{p.end}</td>
              <td class="num">{p.available}</td>
              <td class="num">{p.acquired}</td>
              <td class="num">{p.acknowledged}</td>
              <td class="num">{p.archived}</td>
              <td class="num">{p.dead_lettering}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

/// Moves a group's committed offsets (only while it has no members), as
/// `kafka-consumer-groups --reset-offsets` does.
function ResetOffsets({ group, topics }: { group: string; topics: string[] }) {
  const [run, state] = useAction();
  const [topic, setTopic] = useState(topics[0] ?? "");
  const [to, setTo] = useState("earliest");
  const [value, setValue] = useState("");
  const submit = (e: Event) => {
    e.preventDefault();
    const body: Record<string, unknown> = { topic: topic.trim(), to };
    if (to === "offset") body.value = Number(value);
    if (to === "timestamp") body.value = Date.parse(value);
    run(() => act("POST", `/v1/groups/${encodeURIComponent(group)}/offsets`, body));
  };
  return (
    <section aria-label="changes">
      <h2>Changes</h2>
      <form id="reset-offsets" class="find" onSubmit={submit}>
        <label>Reset offsets of topic <input id="reset-topic" list="reset-topics" value={topic} required onInput={(e) => setTopic(e.currentTarget.value)} /></label>
        <datalist id="reset-topics">{topics.map((t) => <option value={t} />)}</datalist>
        <label>to{" "}
          <select id="reset-to" value={to} onChange={(e) => setTo(e.currentTarget.value)}>
            <option value="earliest">earliest</option>
            <option value="latest">latest</option>
            <option value="timestamp">time</option>
            <option value="offset">offset</option>
          </select>
        </label>
        {(to === "offset" || to === "timestamp") && (
          <label>{to === "offset" ? "Offset" : "Time"} <input id="reset-value" value={value} required placeholder={to === "offset" ? "1200" : "2026-12-07T10:00:00Z"} onInput={(e) => setValue(e.currentTarget.value)} /></label>
        )}
        <button type="submit">Reset (group must be empty)</button>
      </form>
      <Outcome state={state} />
    </section>
  );
}

/// Open transactions, the coordinators' and the partitions', and the hanging ones.
function TransactionsPage() {
  const t = usePoll<Transactions>("/v1/transactions");
  const d = t.data;
  const [run, state] = useAction();
  const [confirming, setConfirming] = useState<string | null>(null);
  const key = (o: OpenTxn) => `${o.topic}-${o.partition}-${o.producer_id}`;
  const abort = (o: OpenTxn) =>
    run(() =>
      act("POST", `/v1/topics/${encodeURIComponent(o.topic)}/partitions/${o.partition}/abort-transaction`, {
        producer_id: o.producer_id,
        producer_epoch: o.producer_epoch,
        coordinator_epoch: o.coordinator_epoch,
      }),
    ).then(() => setConfirming(null));
  return (
    <section aria-label="transactions">
      <h1>Transactions</h1>
      <Failure error={t.error} />
      <Missing brokers={d?.unanswered} />
      {d && (
        <div class="stats" id="transaction-totals">
          <Stat label="open (coordinators)" value={d.coordinated_total} />
          <Stat label="open in partitions" value={d.open_total} />
          <Stat label="hanging" value={d.hanging} warn={d.hanging > 0} />
        </div>
      )}
      <h2>Open transactions <span class="muted">(by their coordinators)</span></h2>
      <table id="transactions">
        <thead>
          <tr><th>transactional id</th><th>state</th><th class="num">coordinator</th><th class="num">producer</th><th class="num">open for</th><th class="num">timeout</th><th>partitions</th></tr>
        </thead>
        <tbody>
          {d?.coordinated.map((c) => (
            <tr key={c.transactional_id}>
              <td>{c.transactional_id}</td>
              <td>{c.state}</td>
              <td class="num">{c.coordinator}</td>
              <td class="num">{c.producer_id} (epoch {c.producer_epoch})</td>
              <td class="num">{c.start_ms < 0 ? "—" : seconds(Math.max(0, d.now_ms - c.start_ms) / 1000)}</td>
              <td class="num">{seconds(c.timeout_ms / 1000)}</td>
              <td class="value">{c.partitions.map(([tp, p]) => `${tp}-${p}`).join(", ")}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {d && d.coordinated.length === 0 && <p class="muted">No transaction is open.</p>}
      <h2>Open in partitions <span class="muted">(by the partitions' leaders; hanging: open over {d ? seconds(d.transaction_max_timeout_ms / 1000) : "—"} and no coordinator holds it)</span></h2>
      <table id="open-transactions">
        <thead>
          <tr><th>partition</th><th class="num">leader</th><th class="num">producer</th><th class="num">first offset</th><th class="num">held back (records)</th><th class="num">last write</th><th>hanging</th>{d?.actions && <th>change</th>}</tr>
        </thead>
        <tbody>
          {d?.open.map((o) => (
            <tr key={key(o)} class={o.hanging ? "warn" : ""}>
              <td><a href={`/topics/${encodeURIComponent(o.topic)}`}>{o.topic}</a>-{o.partition}</td>
              <td class="num">{o.leader}</td>
              <td class="num">{o.producer_id} (epoch {o.producer_epoch})</td>
              <td class="num">{o.first_offset}</td>
              <td class="num">{Math.max(0, o.high_watermark - o.last_stable)}</td>
              <td class="num">{seconds(Math.max(0, d.now_ms - o.last_timestamp) / 1000)} ago</td>
              <td>{o.hanging === null ? "unknown" : o.hanging ? "hanging" : "no"}</td>
              {d.actions && (
                <td>
                  {confirming === key(o) ? (
                    <button type="button" class="abort-confirm" onClick={() => abort(o)}>Abort it: read_committed readers move on</button>
                  ) : (
                    <button type="button" class="abort" onClick={() => setConfirming(key(o))}>Abort…</button>
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      {d && d.open.length === 0 && <p class="muted">No partition has an open transaction.</p>}
      <Outcome state={state} />
    </section>
  );
}

/// A list the caller may see, or why not.
function Listing<T>({ id, title, l, head, row }: { id: string; title: string; l: { refused?: string; total?: number; items?: T[] }; head: string[]; row: (x: T) => preact.JSX.Element }) {
  return (
    <>
      <h2>{title} {l.total !== undefined && <span class="muted">({l.total})</span>}</h2>
      {l.refused ? (
        <p class="muted">{l.refused}.</p>
      ) : l.total === 0 ? (
        <p class="muted">None.</p>
      ) : (
        <table id={id}>
          <thead><tr>{head.map((h) => <th>{h}</th>)}</tr></thead>
          <tbody>{l.items?.map(row)}</tbody>
        </table>
      )}
    </>
  );
}

/// ACLs, SCRAM users and quotas, read-only (no secret is ever sent).
function SecurityPage() {
  const [query, setQuery] = useState("");
  const s = usePoll<Security>(`/v1/security?q=${encodeURIComponent(query)}`);
  const d = s.data;
  return (
    <section aria-label="security">
      <h1>Security</h1>
      <Failure error={s.error} />
      {d && (
        <p id="authorizer">
          The authorizer is <strong>{d.authorizer ? "on" : "off"}</strong>
          {d.authorizer ? ": a request needs an ACL that allows it" : ": every principal may do everything (and ACLs cannot be created)"}. Super users:{" "}
          {d.super_users.length ? d.super_users.join(", ") : "none"}.
        </p>
      )}
      <label class="filter">
        Filter by principal, user or resource <input type="search" value={query} onInput={(e) => setQuery(e.currentTarget.value)} />
      </label>
      {d && (
        <>
          <Listing id="acls" title="ACLs" l={d.acls} head={["principal", "host", "resource", "pattern", "operation", "permission"]} row={(a) => (
            <tr><td>{a.principal}</td><td>{a.host}</td><td>{a.resource_type} {a.resource_name}</td><td>{a.pattern_type}</td><td>{a.operation}</td><td>{a.permission}</td></tr>
          )} />
          <Listing id="users" title="SCRAM users" l={d.users} head={["user", "credentials"]} row={(u) => (
            <tr><td>{u.user}</td><td>{u.credentials.map((c) => `${c.mechanism} (${c.iterations} iterations)`).join(", ")}</td></tr>
          )} />
          <Listing id="quotas" title="Client quotas" l={d.quotas} head={["user", "client id", "quotas"]} row={(q) => (
            <tr><td>{q.user ?? "—"}</td><td>{q.client_id ?? "—"}</td><td>{Object.entries(q.values).map(([k, v]) => `${k} = ${v}`).join(", ")}</td></tr>
          )} />
        </>
      )}
    </section>
  );
}

/// Local against remote bytes, as a bar.
function TierBar({ local, remote }: { local: number; remote: number }) {
  const total = local + remote;
  const share = total === 0 ? 0 : (100 * remote) / total;
  return (
    <span class="tierbar" title={`${bytes(remote)} remote, ${bytes(local)} local`}>
      <span class="remote" style={{ width: `${share.toFixed(1)}%` }} />
    </span>
  );
}

/// A field as a person reads it: JSON pretty-printed, other text as it is, binary as hex.
function FieldView({ f }: { f: Field | null }) {
  if (f === null) return <span class="muted">null</span>;
  let shown = f.text ?? f.hex ?? "";
  if (f.json && f.text !== undefined) shown = JSON.stringify(JSON.parse(f.text), null, 2);
  return (
    <>
      <pre class={f.hex !== undefined ? "hex" : ""}>{shown}</pre>
      {f.truncated && <span class="muted">({f.bytes} bytes, cut)</span>}
    </>
  );
}

/// A partition's records from an offset, a time, or the latest; paged by offset.
function MessagesView({ topic, partitions }: { topic: string; partitions: number }) {
  const [partition, setPartition] = useState(0);
  const [start, setStart] = useState("");
  const [data, setData] = useState<Messages | undefined>();
  const [error, setError] = useState<string | undefined>();
  const load = async (query: string) => {
    try {
      setData(await get<Messages>(`/v1/topics/${encodeURIComponent(topic)}/messages?partition=${partition}${query}`));
      setError(undefined);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    }
  };
  useEffect(() => {
    load("");
  }, [topic, partition]);
  const find = (e: Event) => {
    e.preventDefault();
    const s = start.trim();
    if (/^\d+$/.test(s)) load(`&offset=${s}`);
    else if (s !== "" && !isNaN(Date.parse(s))) load(`&timestamp=${Date.parse(s)}`);
    else if (s === "") load("");
    else setError(`'${s}' is neither an offset nor a date and time`);
  };
  return (
    <section aria-label="messages">
      <h2>Messages</h2>
      <form class="find" onSubmit={find}>
        <label>
          Partition{" "}
          {partitions <= 100 ? (
            <select id="message-partition" value={partition} onChange={(e) => setPartition(Number(e.currentTarget.value))}>
              {Array.from({ length: partitions }, (_, i) => (
                <option value={i}>{i}</option>
              ))}
            </select>
          ) : (
            <input id="message-partition" type="number" min={0} max={partitions - 1} value={partition} onChange={(e) => setPartition(Math.max(0, Math.min(partitions - 1, Number(e.currentTarget.value))))} />
          )}
        </label>
        <label>
          From offset or time{" "}
          <input id="message-start" value={start} placeholder="latest, 1200, 2026-12-07T10:00:00Z" onInput={(e) => setStart(e.currentTarget.value)} />
        </label>
        <button type="submit">Show</button>
        {data && data.from > data.log_start && (
          <button type="button" onClick={() => load(`&offset=${Math.max(data.log_start, data.from - MESSAGES_PAGE)}`)}>Older</button>
        )}
        {data && data.next < data.last_stable_offset && (
          <button type="button" onClick={() => load(`&offset=${data.next}`)}>Newer</button>
        )}
      </form>
      <Failure error={error} />
      {data && (
        <p class="muted">
          Offsets {data.log_start}–{data.last_stable_offset - 1} committed; showing from {data.from}.
        </p>
      )}
      <table id="messages">
        <thead>
          <tr><th class="num">offset</th><th>time</th><th>key</th><th>value</th><th>headers</th></tr>
        </thead>
        <tbody>
          {data?.records.map((m) => (
            <tr key={m.offset}>
              <td class="num">{m.offset}</td>
              <td>{new Date(m.timestamp).toISOString()}</td>
              <td><FieldView f={m.key} /></td>
              <td><FieldView f={m.value} /></td>
              <td>{m.headers.map((h) => (<div>{h.key}: <FieldView f={h.value} /></div>))}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/// A topic's changes: a config set or back to its default, its moves cancelled, the topic
/// deleted once its name is typed again.
function TopicActions({ name, d }: { name: string; d: TopicDetail }) {
  const [run, state] = useAction();
  const [key, setKey] = useState("");
  const [value, setValue] = useState("");
  const [confirm, setConfirm] = useState("");
  const path = `/v1/topics/${encodeURIComponent(name)}`;
  const moving = d.partitions.filter((p) => p.adding.length + p.removing.length > 0);
  return (
    <section aria-label="changes">
      <h2>Changes</h2>
      <form id="set-config" class="find" onSubmit={(e) => { e.preventDefault(); run(() => act("POST", `${path}/configs`, { set: { [key.trim()]: value } })); }}>
        <label>Config <input id="config-name" value={key} required placeholder="retention.ms" onInput={(e) => setKey(e.currentTarget.value)} /></label>
        <label>Value <input id="config-value" value={value} onInput={(e) => setValue(e.currentTarget.value)} /></label>
        <button type="submit">Set</button>
        <button type="button" disabled={key.trim() === ""} onClick={() => run(() => act("POST", `${path}/configs`, { delete: [key.trim()] }))}>Back to default</button>
      </form>
      {moving.map((p) => (
        <p key={p.partition}>
          Partition {p.partition} is moving.{" "}
          <button type="button" onClick={() => run(() => act("DELETE", `${path}/partitions/${p.partition}/move`))}>Cancel its move</button>
        </p>
      ))}
      <form id="delete-topic" class="find" onSubmit={(e) => { e.preventDefault(); run(() => act("DELETE", path)); }}>
        <label>Type <strong>{name}</strong> to delete it <input id="delete-confirm" value={confirm} onInput={(e) => setConfirm(e.currentTarget.value)} /></label>
        <button type="submit" disabled={confirm !== name}>Delete topic</button>
      </form>
      <Outcome state={state} />
    </section>
  );
}

const PARTITIONS_PAGE = 100;
/// Records per messages page (the server's default).
const MESSAGES_PAGE = 20;

function TopicPage({ name }: { name: string }) {
  const [offset, setOffset] = useState(0);
  const t = usePoll<TopicDetail>(`/v1/topics/${encodeURIComponent(name)}?offset=${offset}&limit=${PARTITIONS_PAGE}`);
  const d = t.data;
  return (
    <section aria-label="topic">
      <p><a href="/">← overview</a></p>
      <h1>Topic {name}</h1>
      <Failure error={t.error} />
      <Missing brokers={d?.unanswered} />
      <table id="topic-partitions">
        <thead>
          <tr><th class="num">partition</th><th class="num">leader</th><th>replicas</th><th>ISR</th><th class="num">log start</th><th class="num">high watermark</th><th class="num">local</th><th class="num">remote</th><th>remote ↔ local</th></tr>
        </thead>
        <tbody>
          {d?.partitions.map((p) => (
            <tr key={p.partition}>
              <td class="num">{p.partition}</td>
              <td class="num">{p.leader ?? "offline"}</td>
              <td>
                {p.replicas.join(", ")}
                {p.adding.length + p.removing.length > 0 && (
                  <span class="muted"> (moving: {[...p.adding.map((r) => `+${r}`), ...p.removing.map((r) => `−${r}`)].join(" ")})</span>
                )}
              </td>
              <td>{p.isr.join(", ")}</td>
              <td class="num">{p.log_start ?? "—"}</td>
              <td class="num">{p.high_watermark ?? "—"}</td>
              <td class="num">{p.local_bytes === null ? "—" : bytes(p.local_bytes)}</td>
              <td class="num">{bytes(p.remote_bytes)}</td>
              <td><TierBar local={p.local_bytes ?? 0} remote={p.remote_bytes} /></td>
            </tr>
          ))}
        </tbody>
      </table>
      {d && d.partitions_total > PARTITIONS_PAGE && (
        <nav class="pager">
          <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PARTITIONS_PAGE))}>previous</button>
          <span>partitions {offset}–{Math.min(offset + PARTITIONS_PAGE, d.partitions_total) - 1} of {d.partitions_total}</span>
          <button disabled={offset + PARTITIONS_PAGE >= d.partitions_total} onClick={() => setOffset(offset + PARTITIONS_PAGE)}>next</button>
        </nav>
      )}
      {d && <MessagesView topic={name} partitions={d.partitions_total} />}
      {d?.actions && <TopicActions name={name} d={d} />}
      <h2>Configs</h2>
      <table id="topic-configs">
        <thead><tr><th>name</th><th>value</th><th>source</th></tr></thead>
        <tbody>
          {d?.configs.map((c) => (
            <tr key={c.name}><td>{c.name}</td><td class="value">{c.value}</td><td>{c.source}</td></tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

interface Line<T> {
  label: string;
  value: (p: T) => number | null;
  color: string;
}

/// A chart of the last hour (uPlot, on a canvas), with its latest and peak values in words
/// for those who do not see it.
function Chart<T extends { t_ms: number }>({ title, unit, points, lines, format }: { title: string; unit: string; points: T[]; lines: Line<T>[]; format: (v: number) => string }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    const data: uPlot.AlignedData = [points.map((p) => p.t_ms / 1000), ...lines.map((l) => points.map(l.value))];
    if (!el.current) return;
    if (!plot.current) {
      plot.current = new uPlot(
        {
          width: 560,
          height: 180,
          series: [{}, ...lines.map((l) => ({ label: l.label, stroke: l.color, width: 1.5, spanGaps: false, value: (_: uPlot, v: number | null) => (v === null ? "—" : format(v)) }))],
          axes: [{}, { values: (_: uPlot, ticks: number[]) => ticks.map(format), size: 90 }],
          scales: {
            // The last hour, whatever the points cover; from zero up.
            x: { time: true, range: () => [Date.now() / 1000 - 3600, Date.now() / 1000] },
            y: { range: (_: uPlot, _min: number, max: number) => [0, max > 0 ? max * 1.1 : 1] },
          },
        },
        data,
        el.current,
      );
    } else {
      plot.current.setData(data);
    }
  }, [points]);
  useEffect(() => () => plot.current?.destroy(), []);
  const summary = lines.map((l) => {
    const values = points.map(l.value).filter((v): v is number => v !== null);
    const last = values.length ? format(values[values.length - 1]) : "—";
    const peak = values.length ? format(Math.max(...values)) : "—";
    return `${l.label}: ${last} now, ${peak} at most`;
  });
  return (
    <figure>
      <figcaption>{title} <span class="muted">({unit}; {summary.join("; ")})</span></figcaption>
      <div ref={el} />
    </figure>
  );
}

const rate = (v: number) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
const perSecond = (v: number) => `${bytes(v)}/s`;
const ms = (v: number) => `${v >= 10 ? v.toFixed(0) : v.toFixed(2)} ms`;
const percent = (v: number) => `${(100 * v).toFixed(1)}%`;

/// A broker's own figures over the last hour.
function BrokerPage({ id }: { id: string }) {
  const h = usePoll<History>(`/v1/brokers/${encodeURIComponent(id)}/history`);
  const points = h.data?.points ?? [];
  return (
    <section aria-label="broker">
      <p><a href="/">← overview</a></p>
      <h1>Broker {id}</h1>
      <Failure error={h.error} />
      {h.data && points.length === 0 && <p class="muted">No figures yet: the first arrive {h.data.interval_s} s after the broker starts, one every {h.data.interval_s} s.</p>}
      {points.length > 0 && (
        <div class="charts" id="charts">
          <Chart title="Throughput" unit="per second" points={points} format={perSecond} lines={[
            { label: "bytes in", value: (p) => p.bytes_in_per_s, color: "#1f5fbf" },
            { label: "records fetched", value: (p) => p.fetched_bytes_per_s, color: "#c2571a" },
          ]} />
          <Chart title="Requests" unit="per second" points={points} format={rate} lines={[
            { label: "produce", value: (p) => p.produce_per_s, color: "#1f5fbf" },
            { label: "fetch", value: (p) => p.fetch_per_s, color: "#c2571a" },
          ]} />
          <Chart title="p99 latency" unit="ms, upper bucket bound" points={points} format={ms} lines={[
            { label: "produce", value: (p) => p.produce_p99_ms, color: "#1f5fbf" },
            { label: "fetch (long polls included)", value: (p) => p.fetch_p99_ms, color: "#c2571a" },
          ]} />
          <Chart title="Remote cache hit ratio" unit="blocks found in memory or on disk" points={points} format={percent} lines={[
            { label: "hits", value: (p) => p.cache_hit_ratio, color: "#1e6b34" },
          ]} />
          <Chart title="Object store" unit="per second" points={points} format={rate} lines={[
            { label: "requests", value: (p) => p.object_store_requests_per_s, color: "#1f5fbf" },
            { label: "errors", value: (p) => p.object_store_errors_per_s, color: "#b3261e" },
          ]} />
          <Chart title="Zones" unit="bytes per second; cross-zone bytes are what a cloud bills" points={points} format={perSecond} lines={[
            { label: "within its zone", value: (p) => p.same_zone_bytes_per_s ?? null, color: "#1e6b34" },
            { label: "across zones", value: (p) => p.cross_zone_bytes_per_s ?? null, color: "#b3261e" },
          ]} />
        </div>
      )}
    </section>
  );
}

function App() {
  const path = location.pathname;
  const broker = path.match(/^\/brokers\/(.+)$/);
  if (broker) return <BrokerPage id={decodeURIComponent(broker[1])} />;
  const group = path.match(/^\/groups\/(.+)$/);
  if (group) return <GroupPage name={decodeURIComponent(group[1])} />;
  const topic = path.match(/^\/topics\/(.+)$/);
  if (topic) return <TopicPage name={decodeURIComponent(topic[1])} />;
  if (path === "/transactions") return <TransactionsPage />;
  if (path === "/security") return <SecurityPage />;
  return <OverviewPage />;
}

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App />, root);
}
