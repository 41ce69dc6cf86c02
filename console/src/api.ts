// The admin API the console reads: the same JSON endpoints `strata` and scripts use
// (docs/admin-api.md). Every call is bounded (a timeout) and its failure is said in words.

export class ApiError extends Error {}

const TIMEOUT_MS = 5000;

export async function get<T>(path: string): Promise<T> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  let resp: Response;
  try {
    resp = await fetch(path, { signal: ctl.signal, headers: { accept: "application/json" } });
  } catch (e) {
    throw new ApiError(
      ctl.signal.aborted
        ? `the broker did not answer ${path} within ${TIMEOUT_MS / 1000} s`
        : `the broker cannot be reached (${String(e)})`,
    );
  } finally {
    clearTimeout(timer);
  }
  if (!resp.ok) {
    const text = (await resp.text()).trim();
    throw new ApiError(`${path}: ${resp.status} ${text || resp.statusText}`);
  }
  return (await resp.json()) as T;
}

/// A broker a cluster-wide view asked for its part that did not answer: its figures are
/// missing from the view.
export interface Unanswered {
  broker: number;
  error: string;
}

/// A change (`console_actions_enable`): `body` as JSON; the answer, or why not in words.
export async function act(method: string, path: string, body?: unknown): Promise<string> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 35000);
  let resp: Response;
  try {
    resp = await fetch(path, {
      method,
      signal: ctl.signal,
      headers: { "x-strata-action": "1", "content-type": "application/json", accept: "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(ctl.signal.aborted ? `the broker did not answer within 35 s` : `the broker cannot be reached (${String(e)})`);
  } finally {
    clearTimeout(timer);
  }
  let answer: { done?: string; error?: string; message?: string } = {};
  try {
    answer = await resp.json();
  } catch {
    // An answer that is not JSON: its status says enough.
  }
  if (!resp.ok) throw new ApiError(`${answer.message ?? resp.statusText} (${answer.error ?? resp.status})`);
  return answer.done ?? "done";
}

export interface Broker {
  id: number;
  host: string;
  port: number;
  rack: string | null;
  state: string;
}

/// A node of the metadata quorum as its leader sees it.
export interface QuorumNode {
  id: number;
  voter: boolean;
  log_end: number;
  /// Entries behind the leader's log end (null: unknown).
  behind: number | null;
  last_fetch_ms: number;
}

export interface Quorum {
  leader: number | null;
  term: number;
  log_end: number;
  nodes: QuorumNode[];
}

/// A partition being moved, with how far each follower has fetched (from its leader).
export interface Move {
  topic: string;
  partition: number;
  leader: number | null;
  replicas: number[];
  adding: number[];
  removing: number[];
  log_start: number | null;
  high_watermark: number | null;
  log_ends: Record<string, number> | null;
}

export interface Overview {
  node_id: number;
  /// Whether changes may be made (`console_actions_enable`).
  actions: boolean;
  controller: number | null;
  brokers: Broker[];
  voters: number[];
  /// Null when the quorum has no leader that answered.
  quorum: Quorum | null;
  moves: Move[];
  topics: number;
  partitions: number;
  offline: number;
  under_replicated: number;
  moving: number;
  groups: number;
  unanswered: Unanswered[];
}

export interface TopicRow {
  name: string;
  partitions: number;
  replication_factor: number;
  under_replicated: number;
  offline: number;
  remote_bytes: number;
  /// On the leaders' disks; null while a leader did not answer.
  local_bytes: number | null;
  /// Bytes appended per second over the leaders' last 10 s.
  bytes_in_per_s: number;
}

export interface GroupRow {
  group: string;
  partitions: number;
  lag_records: number;
  lag_seconds: number;
  retention_risk: boolean;
  /// "classic", "consumer" (KIP-848) or "share" (KIP-932); null when unknown.
  kind: string | null;
}

export interface Page<T> {
  total: number;
  offset: number;
  items: T[];
  unanswered: Unanswered[];
}

export interface GroupPartition {
  topic: string;
  partition: number;
  committed: number;
  lag_records: number;
  lag_seconds: number;
  trend_records_per_second: number;
  drain_seconds: number | null;
  retention_risk: boolean;
}

/// A group's total lag at one sample of its coordinator (a point per 30 s, an hour kept).
export interface GroupPoint {
  t_ms: number;
  lag_records: number;
  lag_seconds: number;
}

export interface Member {
  member_id: string;
  instance_id?: string | null;
  client_id: string;
  host: string;
  assignment: { topic: string; partitions: number[] }[];
}

/// The group as its coordinator describes it, or why it may not be shown.
export interface Members {
  kind: string;
  state?: string;
  refused?: string;
  members?: Member[];
}

/// A share partition: from its start offset to the last record handed out, by state.
export interface SharePartition {
  topic: string;
  partition: number;
  start: number;
  end: number;
  available: number;
  acquired: number;
  acknowledged: number;
  archived: number;
  dead_lettering: number;
}

export interface GroupDetail {
  group: string;
  /// Null when the coordinator did not answer.
  members: Members | null;
  share_partitions: SharePartition[];
  dead_letter_topic: string | null;
  partitions: GroupPartition[];
  history: GroupPoint[];
  actions: boolean;
  unanswered: Unanswered[];
}

/// A transactional id with an open transaction, from its coordinator.
export interface Coordinated {
  transactional_id: string;
  coordinator: number;
  state: string;
  producer_id: number;
  producer_epoch: number;
  start_ms: number;
  timeout_ms: number;
  partitions: [string, number][];
}

/// A producer's transaction open in a partition, from the partition's leader.
export interface OpenTxn {
  topic: string;
  partition: number;
  leader: number;
  producer_id: number;
  producer_epoch: number;
  coordinator_epoch: number;
  first_offset: number;
  last_timestamp: number;
  last_stable: number;
  high_watermark: number;
  /// Null: unknown while a broker did not answer.
  hanging: boolean | null;
}

export interface Transactions {
  now_ms: number;
  actions: boolean;
  transaction_max_timeout_ms: number;
  coordinated_total: number;
  open_total: number;
  hanging: number;
  coordinated: Coordinated[];
  open: OpenTxn[];
  unanswered: Unanswered[];
}

/// A list the caller may see, or why not.
export interface Listed<T> {
  refused?: string;
  total?: number;
  items?: T[];
}

export interface Acl {
  principal: string;
  host: string;
  resource_type: string;
  resource_name: string;
  pattern_type: string;
  operation: string;
  permission: string;
}

export interface ScramUser {
  user: string;
  credentials: { mechanism: string; iterations: number }[];
}

export interface Quota {
  user: string | null;
  client_id: string | null;
  values: Record<string, number>;
}

export interface Security {
  authorizer: boolean;
  super_users: string[];
  acls: Listed<Acl>;
  users: Listed<ScramUser>;
  quotas: Listed<Quota>;
}

export interface TopicPartition {
  partition: number;
  leader: number | null;
  replicas: number[];
  isr: number[];
  /// Replicas a move is adding and removing.
  adding: number[];
  removing: number[];
  /// The log's offsets, from the partition's leader (null when offline or not answering).
  log_start: number | null;
  high_watermark: number | null;
  local_bytes: number | null;
  remote_bytes: number;
}

export interface TopicConfig {
  name: string;
  value: string;
  source: string;
}

export interface TopicDetail {
  name: string;
  topic_id: string;
  /// The topic's partition count; `partitions` is the page from `partitions_offset`.
  partitions_total: number;
  partitions_offset: number;
  partitions: TopicPartition[];
  configs: TopicConfig[];
  /// Whether changes may be made (`console_actions_enable`).
  actions: boolean;
  unanswered: Unanswered[];
}

/// A key, value or header value: text (`json` when it parses as JSON) or hex.
export interface Field {
  text?: string;
  hex?: string;
  json?: boolean;
  bytes: number;
  truncated: boolean;
}

export interface Message {
  offset: number;
  timestamp: number;
  key: Field | null;
  value: Field | null;
  headers: { key: string; value: Field | null }[];
}

export interface Messages {
  partition: number;
  log_start: number;
  last_stable_offset: number;
  from: number;
  next: number;
  records: Message[];
}

/// One interval of a broker's figures (rates per second over the interval ending at t_ms).
export interface HistoryPoint {
  t_ms: number;
  bytes_in_per_s: number;
  fetched_bytes_per_s: number;
  produce_per_s: number;
  fetch_per_s: number;
  produce_p99_ms: number | null;
  fetch_p99_ms: number | null;
  cache_hit_ratio: number | null;
  object_store_requests_per_s: number;
  object_store_errors_per_s: number;
  same_zone_bytes_per_s: number;
  cross_zone_bytes_per_s: number;
}

export interface History {
  broker: number;
  interval_s: number;
  points: HistoryPoint[];
}
