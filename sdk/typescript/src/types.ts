// The API's types, with the wire's member names (docs/openapi.json,
// components.schemas; the Go client's client/types.go). Bytes that the
// wire carries as base64 are Uint8Array here where the SDK decodes them
// (output frames, JCP envelopes); request bodies take Uint8Array or
// strings and the SDK encodes them.

import type { APIErrorBody } from "./errors.js";

/** A tier: `S1` (native programs), `S2` (WebAssembly), `S5` (a microVM), … */
export type Tier = "S0" | "S1" | "S2" | "S3" | "S4" | "S5" | "S6" | "S7";

/** Bytes a request may carry: raw bytes, or text (sent as its UTF-8). */
export type BytesLike = Uint8Array | string;

/** What a live sandbox is created with (POST /v1/sandboxes). */
export interface SandboxSpec {
  /** `S1` (native programs; the default), `S2` (WebAssembly modules) or `S5` (a microVM of its own). */
  tier?: Tier | string;
  /** Grants in the command line's syntax (`fs:/data:ro`, `cpu:5J`); paths absolute. A workspace is granted read-write besides. */
  grants?: string[];
  /** Added to every exec's environment. */
  env?: Record<string, string>;
  /** The sandbox's memory limit (S1: its cgroup's, shared by all it runs); 0: the service's. */
  memory_bytes?: number;
  /** The sandbox's process limit; 0: the service's. */
  pids?: number;
  /** CPUs (fractional); 0: the service's. */
  cpus?: number;
  /** TCP ports the sandbox's processes may listen on, inside its own network namespace (loopback only). */
  listen?: number[];
  /** An imported image (name, ID or unique prefix) whose root filesystem an S1 sandbox runs in. */
  image?: string;
  /** A signed environment manifest (`sandbox manifest -o`), signed by the service's host key: the sandbox is made from it. */
  manifest?: unknown;
}

/** An exec that a resumption continued (an S2 exec parked by a suspension). */
export interface Continued {
  /** The exec's number in its sandbox. */
  n: number;
  /** Its sealed result, as one whole run. */
  result?: Result;
  /** What it wrote to stdout after its park point, base64 on the wire. */
  stdout?: string;
  /** What it wrote to stderr after its park point, base64 on the wire. */
  stderr?: string;
  /** Why it could not be continued. */
  error?: string;
}

/** A sandbox as the service describes it. */
export interface SandboxInfo {
  /** Its id, `sb-…`. */
  id: string;
  /** Its tier. */
  tier: string;
  /** `live`, or `suspended` (its workspace kept by address, nothing running: resume starts it again); in a cluster's list also `lost`. */
  state: "live" | "suspended" | "lost" | string;
  /** In a cluster's list: the id of the host that holds it, where that is not the host asked. */
  host?: string;
  /** Its workspace's path (a new one after each resumption). */
  workspace?: string;
  /** When it was created (RFC 3339). */
  created: string;
  /** Execs it has run. */
  execs: number;
  /** Execs running now. */
  running: number;
  /** Its grants, in the command line's syntax (the workspace's included); `[]` when it has none. */
  grants: string[];
  /** Its environment. */
  env?: Record<string, string>;
  /** Its listen ports. */
  listen?: number[];
  /** The image root it runs in (`b3:…`). */
  root?: string;
  /** The manifest it was made from (`b3:…`). */
  manifest?: string;
  /** This life of its processes: a new one at each creation and resumption. */
  incarnation?: string;
  /** Execs a resumption continued. */
  continued?: Continued[];
}

/** A warm pool (`sandbox serve --pool`) and what it did. */
export interface Pool {
  name: string;
  size: number;
  ready: number;
  draining: boolean;
  made: number;
  claims: number;
  misses: number;
  evictions: number;
  failures: number;
  /** Energy spent keeping claimed sandboxes ready, µJ. */
  claimed_uj: number;
  /** Energy spent on evicted ones, µJ. */
  evicted_uj: number;
}

/** A one-shot run's own limits; absent or 0 fields take the service's. */
export interface Limits {
  /** S1: its cgroup's memory (at least 16 MiB). */
  memory_bytes?: number;
  /** S1: its processes and threads (at least 2). */
  pids?: number;
  /** S1: thousandths of a CPU. */
  cpu_millis?: number;
  /** S2: 64 KiB pages of guest memory (1–65536). */
  memory_pages?: number;
}

/** A JCP presentation: a chain (root first) and an invocation signed by its last grant's audience. */
export interface JCPPresentation {
  /** COSE_Sign1 envelopes, root first (bytes, or standard base64). */
  chain: BytesLike[];
  /** The invocation envelope (bytes, or standard base64). */
  invocation: BytesLike;
}

/**
 * A program's stdin: given whole (bytes or text, at most 16 MiB, sent in
 * the JSON body) or streamed as the program reads it (a Node readable
 * stream or any async iterable of chunks: the body is sent as
 * `application/x-sandbox-exec-stream`).
 */
export type Stdin = BytesLike | NodeJS.ReadableStream | AsyncIterable<Uint8Array | string>;

/** One command in a live sandbox (POST /v1/sandboxes/{id}/exec). */
export interface ExecSpec {
  /** The command and its arguments. */
  args: string[];
  /** Added to its environment. */
  env?: Record<string, string>;
  /** Its working directory (default: the workspace). */
  dir?: string;
  /** The service's wall-clock limit for it, ms: 0 or absent one minute, negative none. It ends with outcome `deadline`. */
  deadline_ms?: number;
  /** Its stdin. */
  stdin?: Stdin;
  /** Names the call so it can be interrupted (16–128 of A-Za-z0-9_-); the SDK picks one when absent. */
  interrupt_key?: string;
  /** Presents the call with a JCP chain: the gate decides before anything runs. */
  jcp?: JCPPresentation;
}

/** A one-shot sealed run (POST /v1/runs): an exec's fields, and a run's own. */
export interface RunSpec extends ExecSpec {
  /** Grants in the command line's syntax; paths absolute. */
  grants?: string[];
  /** A grant set in grants.json's form, merged with `grants` (no injected credentials). */
  grants_json?: unknown;
  /** The tier to run at (default: what the unit and grants require). */
  tier?: Tier | string;
  /** Allow a tier above the requirement. */
  escalate?: boolean;
  /** An imported image whose root filesystem a native run has. */
  image?: string;
  /** Its own limits. */
  limits?: Limits;
}

/** How a run ended. */
export interface Outcome {
  /** `exited`, `deadline`, `out-of-fuel`, `budget-exhausted`, `out-of-memory`, `trapped`, `killed`, `failed`. */
  status: string;
  /** Its exit code, exactly when it exited. */
  exit_code?: number;
  /** S1: the signal that ended the guest. */
  signal?: number;
  /** For people. */
  detail?: string;
}

/** One device class's energy in a run's receipt, µJ. */
export interface Energy {
  class: string;
  measured_uj: number;
  estimated_uj: number;
  /** Each reading's "Provenance source". */
  provenance: string[];
}

/** A sealed run, as `sandbox run --json` describes it (docs/cli.md, schema 1). */
export interface Result {
  schema: number;
  /** The run's id: its attestation's address, `b3:…`. */
  run?: string;
  /** Whether its records are stored, signed, verifiable. */
  sealed: boolean;
  /** Why it was refused, failed, or not sealed. */
  error?: string;
  /** The tier chosen. */
  tier?: string;
  /** The tier its grants required, and why. */
  tier_required?: string;
  tier_reason?: string;
  outcome?: Outcome;
  /** What `sandbox run` exits with for it. */
  exit_status: number;
  /** Whose status it is: `guest` (its exit status, or 128+N for signal N) or `sandbox` (a limit, a refusal, an interrupt). */
  exit_status_from: "guest" | "sandbox" | string;
  duration_ms?: number;
  fuel?: number;
  energy?: Energy[];
  /** The run directory, on the service's host (what {@link SandboxClient.verifyRun} reads). */
  records?: string;
  /** Remarks on the run. */
  notes?: string[];
}

/** An exec's or run's result, with its output when the SDK collected it. */
export interface ExecResult extends Result {
  /** Everything the program wrote to stdout (collected unless an `onStdout` callback or iteration took it). */
  stdout?: Buffer;
  /** Everything the program wrote to stderr (likewise). */
  stderr?: Buffer;
}

/** One entry of a directory listing. */
export interface FileInfo {
  name: string;
  size: number;
  /** Go's mode string, e.g. `-rw-r--r--`, `drwxr-xr-x`. */
  mode: string;
  dir?: boolean;
  link?: boolean;
  mod_time: string;
}

/** What a fork makes (POST /v1/sandboxes/{id}/fork). */
export interface ForkSpec {
  /** How many sandboxes: 1 to 64 (MAX_FORK). */
  count: number;
  /** Leave the children suspended at the parent's state: each starts when it is resumed. */
  suspended?: boolean;
}

/** One child of a fork: its sandbox where it was made, else the error that stopped it (its record closed saying why). */
export interface ForkChild {
  id: string;
  sandbox?: SandboxInfo;
  error?: APIErrorBody;
}

/**
 * What a fork made: the parent, its record's head₀ (`genesis`) and the
 * head its state was taken at (as each child's record cites them), the
 * snapshot every child began from, and every child in order.
 */
export interface Forked {
  parent: string;
  genesis: string;
  head: string;
  snapshot: Snapshot;
  children: ForkChild[];
}

/** A preview of one of a live S1 or S5 sandbox's listen ports (POST /v1/sandboxes/{id}/ports). */
export interface PreviewSpec {
  /** One of the ports the sandbox was made with (`listen`). */
  port: number;
  /** How long the preview lasts, in seconds: 1 to 86 400 (0 or absent: 3 600). */
  ttl_seconds?: number;
}

/**
 * An open preview of a sandbox's port: `preview` is its token's content
 * address (`b3:…`, as the sandbox's record keeps it), `expires` when it
 * ends (RFC 3339, whole seconds). `token` and `url`
 * (`https://HOST:PORT/preview/TOKEN/`, on the service's TCP listener) are
 * said only when it is made: whoever has the URL reaches the port, with no
 * bearer token, until it expires or is revoked.
 */
export interface Preview {
  sandbox: string;
  port: number;
  preview: string;
  expires: string;
  token?: string;
  url?: string;
}

/** A sandbox's open previews, without their tokens (GET /v1/sandboxes/{id}/ports). */
export interface Previews {
  previews: Preview[];
}

/** How many previews a revocation ended (DELETE /v1/sandboxes/{id}/ports/{port}). */
export interface Revoked {
  revoked: number;
}

/** What a suspension retained, by content address. */
export interface Snapshot {
  /** The workspace's tree. */
  root: string;
  /** A memory image (S5, S2 parked execs), where one is kept. */
  memory?: string;
  /** The environment it ran in. */
  manifest: string;
}

/** A sandbox's run record: the durable run it is. */
export interface RecordInfo {
  id: string;
  /** `active`, `parked`, `closed`. */
  phase: string;
  head: string;
  segments: number;
  executed: number;
  /** Idle energy of its parked intervals, µJ. */
  idle_uj: number;
  /** Its executions' energy, µJ. */
  active_uj: number;
  /** Active plus idle, µJ. */
  total_uj: number;
  /** Executions whose receipts are not on the host. */
  runs_missing?: number;
  error?: string;
}

/** A fleet to run in the service: one command over inputs, or units each with its own command line. */
export interface FleetSpec {
  args?: string[];
  env?: Record<string, string>;
  dir?: string;
  grants?: string[];
  grants_json?: unknown;
  /** Each appended to `args` as an item of its own. */
  inputs?: string[];
  /** In place of args and inputs: each item a command line of its own. */
  units?: string[][];
  /** Items at once (1–256; 0: 2). */
  workers?: number;
  /** Intermediate checkpoints every this many done items (0: a tenth; negative: none). */
  checkpoint_every?: number;
}

/** A fleet's progress. */
export interface FleetProgress {
  done: number;
  total: number;
}

/** A fleet that ran: its id and directory in the service's state, its items, the failed ones (still sealed), its signed checkpoint. */
export interface FleetResult {
  id: string;
  dir: string;
  items: number;
  failed: number;
  /** The fleet's signed checkpoint (a signed note). */
  checkpoint: string;
}

/** A seed's owner claim, from the caller's trusted context. */
export interface Claim {
  run: string;
  requester: string;
  thread: string;
  repository: string;
  ref: string;
  head: string;
}

/** Seeds a live S1 sandbox's workspace with a git checkout. */
export interface SeedSpec {
  /** An absolute path the sandbox may read, or an https URL it may reach (no credential in it). */
  source: string;
  ref: string;
  claim?: Claim;
  /** The credential-free https remote bound at the seed's birth. */
  origin?: string;
  /** Authorizes an https fetch; used once, never kept. */
  bearer?: string;
  /** On a retry, the incarnation the first seed answered. */
  incarnation?: string;
}

/** What a seed bound. */
export interface Seeded {
  sandbox: string;
  incarnation: string;
  /** `bound`, or `pending` for an unclaimed seed. */
  state: string;
  head: string;
  cached?: boolean;
  runs?: string[];
}

/** Asks for a passive preservation receipt. */
export interface ReceiptSpec {
  claim: Claim;
  source: string;
  incarnation: string;
}

/** What is stored of a seeded sandbox for one owner and incarnation. */
export interface PreservationReceipt {
  sandbox: string;
  /** `present`, `lost` or `unknown`. */
  state: string;
  reason: string;
  checkpoint?: string;
  incarnation: string;
  taken?: string;
  retain_until?: string;
}

/** A sealed run as the service verifies it against its own key (GET /v1/runs/{id}). */
export interface RunReport {
  run: string;
  verified: boolean;
  problems?: string[];
  signer?: string;
  unit?: string;
  outcome?: Outcome;
  started?: string;
  ended?: string;
  energy?: Energy[];
  notes?: string[];
}

/** GET /v1/key: the key a service's host seals its runs and records with. */
export interface HostKey {
  /** `ed25519:HEX`. */
  key: string;
}

/** GET /v1/health. */
export interface Health {
  ok: boolean;
  /** Live sandboxes. */
  sandboxes: number;
}

// ---- JCP (docs/api.md "JCP"; client/jcp.go) ---------------------------

/** The service's host key and the JCP root keys it trusts. */
export interface JCPInfo {
  /** The service's host key, `ed25519:HEX`: it signs runs' attestations and receipts, decisions, the ledger's heads. */
  key: string;
  roots: string[];
}

/** Why a chain or a ledger does not verify. */
export interface JCPRefusal {
  code: string;
  where?: string;
  detail?: string;
  message: string;
}

/** At most `n` in any `per` seconds. */
export interface JCPRate {
  n: number;
  per: number;
}

/** A grant's caveats; an absent one restricts nothing. */
export interface JCPCaveats {
  models?: string[];
  tiers?: string[];
  hosts?: string[];
  paths?: string[];
  runs?: number;
  rate?: JCPRate;
}

/** What a delegation narrows and an amendment replaces: expiry (Unix seconds), images, ceilings per class (µJ), caveats. */
export interface JCPTerms {
  exp: number;
  images: string[];
  ceilings: Record<string, number>;
  caveats: JCPCaveats;
}

/** One grant of a verified chain. */
export interface JCPGrant {
  id: string;
  iss: string;
  aud: string;
  parent?: string;
  policy?: string;
  iat: number;
  depth: number;
  terms: JCPTerms;
}

/** A chain as the service read it: verified (`ok`, its grants root first) or refused. */
export interface JCPChain {
  ok: boolean;
  refusal?: JCPRefusal;
  grants?: JCPGrant[];
  policy?: string;
}

/** A grant's budget of one device class, µJ; remaining is ceiling − reserved − spent, floored at 0. */
export interface JCPClassBudget {
  class: string;
  ceiling_uj: number;
  reserved_uj: number;
  spent_uj: number;
  remaining_uj: number;
}

/** One grant's budget after the ledger. */
export interface JCPBudget {
  grant: string;
  parent?: string;
  admitted: boolean;
  classes: JCPClassBudget[];
  runs: number;
  revoked: boolean;
  amended: number;
  checkpoint?: number;
  terms?: JCPTerms;
}

/** The service's budget ledger. */
export interface JCPLedger {
  entries: number;
  head: string;
  grants: JCPBudget[];
}

/** The ledger replayed from its genesis. */
export interface JCPLedgerReport {
  ok: boolean;
  refusal?: JCPRefusal;
  entries: number;
  head?: string;
  grants?: JCPBudget[];
}

/** A token the ledger recorded, and the grant's budget after it. */
export interface JCPRecorded {
  token: string;
  grant: string;
  seq?: number;
  budget: JCPBudget;
}

/** A child minted under a mint policy: chain elements are standard base64 on the wire. */
export interface JCPMinted {
  grant: string;
  audience: string;
  chain: string[];
}

/** A policy that names the event and minted nothing, with why. */
export interface JCPNotMinted {
  policy: string;
  code?: string;
  message: string;
}

/** What a named event minted, and what it did not. */
export interface JCPEvent {
  minted: JCPMinted[];
  refused: JCPNotMinted[];
}

/** One event of a watch (GET /v1/sandboxes/{id}/watch). */
export interface WatchEvent {
  /** `watching` (first: the watch is in place), `create`, `modify`, `delete`, `rename`, `overflow` (events were lost) or `ended`. */
  op: "watching" | "create" | "modify" | "delete" | "rename" | "overflow" | "ended" | string;
  /** As the sandbox names it. */
  path?: string;
  /** A rename's old path. */
  from?: string;
  /** The path is a directory. */
  dir?: boolean;
  /** overflow and ended: what happened. */
  why?: string;
}
