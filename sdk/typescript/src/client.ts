// The client of one sandbox service: every operation of docs/api.md, as
// the Go client (client/*.go) has them, async.

import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { SandboxError } from "./errors.js";
import { ExecStream, fleetCall, watchCall, envelopeB64, type CallOptions, type FleetOptions, type WatchOptions } from "./stream.js";
import { parseAddress, readAll, SOCKET_NAME, stateDir, Transport, type Body, type Endpoint, type Env } from "./transport.js";
import type {
  BytesLike,
  WatchEvent,
  ExecResult,
  ExecSpec,
  FileInfo,
  FleetResult,
  FleetSpec,
  Forked,
  ForkSpec,
  Health,
  HostKey,
  JCPBudget,
  JCPChain,
  JCPEvent,
  JCPInfo,
  JCPLedger,
  JCPLedgerReport,
  JCPRecorded,
  Pool,
  PreservationReceipt,
  Preview,
  Previews,
  PreviewSpec,
  ReceiptSpec,
  RecordInfo,
  Result,
  Revoked,
  RunReport,
  RunSpec,
  SandboxInfo,
  SandboxSpec,
  Seeded,
  SeedSpec,
  Snapshot,
} from "./types.js";
import { verifyRunFiles, type RunFiles, type RunVerification, type RunVerifyOptions } from "./verify/rundir.js";
import { BUNDLE_LIMITS, bundleLimits, verifyRunBundle, type BundleLimits } from "./verify/bundle.js";
import { trustSet } from "./verify/trust.js";

/** How to reach the service. Every member is optional: see {@link SandboxClient}'s constructor for the defaults. */
export interface ClientOptions {
  /**
   * The service: a unix socket's path, `unix:PATH`, or `https://HOST:PORT`.
   * Default: $SANDBOX_HOST, else the state directory's `serve.sock`
   * ($SANDBOX_HOME, else $XDG_STATE_HOME/sandbox, else ~/.local/state/sandbox).
   */
  address?: string;
  /** The bearer token for a TCP service. Default: $SANDBOX_TOKEN for an https address. */
  token?: string;
  /** The CA certificate(s) (PEM) to trust for the service's TLS certificate, besides Node's defaults. */
  ca?: string | Buffer | Array<string | Buffer>;
  /** Set false to skip TLS certificate verification (tests only). Default true. */
  rejectUnauthorized?: boolean;
  /**
   * A policy document (sandbox.policy/1) the service holds every call of
   * this client to, besides its own authority: sent as `Sandbox-Policy`
   * (base64url). See {@link SandboxClient.narrowed}.
   */
  policy?: object | string | Uint8Array;
  /** A client-side bound on each plain (not streamed) call, ms; 0 for none. Default 120 000. */
  requestTimeoutMs?: number;
  /** The environment read for the defaults. Default: process.env. */
  env?: Env;
}

/** Options of {@link SandboxClient.resume}. */
export interface ResumeOptions {
  /** In a cluster: resume on the host asked, unplaced (`?here=true`). On a single host, resume as without it. */
  here?: boolean;
}

/** Options of {@link SandboxClient.verifyRun}. */
export interface VerifyRunOptions extends RunVerifyOptions, BundleLimits {
  /**
   * Trust the key the service publishes (GET /v1/key), besides any in
   * `trust`. This proves only that the service you are talking to signed
   * the run, not that the host you meant did: pin its key in `trust`
   * instead where that matters.
   */
  trustServiceKey?: boolean;
  /** Where to read the run's files: `"auto"` (default), `"directory"` (here, on the service's machine) or `"bundle"` (from the service). */
  from?: "auto" | "directory" | "bundle";
}

async function readable(dir: string): Promise<boolean> {
  try {
    await readdir(dir);
    return true;
  } catch {
    return false;
  }
}

function policyHeader(doc: object | string | Uint8Array): string {
  const b = doc instanceof Uint8Array ? Buffer.from(doc) : Buffer.from(typeof doc === "string" ? doc : JSON.stringify(doc), "utf8");
  return b.toString("base64url");
}

/** Where the SDK looks for the service, given these options and environment: its address, and token. */
export function resolveAddress(o: ClientOptions = {}): { endpoint: Endpoint; token?: string } {
  const env = o.env ?? process.env;
  const addr = o.address ?? (env.SANDBOX_HOST || undefined) ?? join(stateDir(env), SOCKET_NAME);
  const endpoint = parseAddress(addr);
  const token = o.token ?? (endpoint.kind === "tcp" ? env.SANDBOX_TOKEN || undefined : undefined);
  return token === undefined ? { endpoint } : { endpoint, token };
}

const p = (id: string) => "/v1/sandboxes/" + encodeURIComponent(id);
const filesPath = (id: string, path: string, extra: Record<string, string> = {}) =>
  `${p(id)}/files?${new URLSearchParams({ path, ...extra }).toString()}`;

/**
 * A client of one sandbox service (`sandbox serve`). Nothing is sent until
 * the first call; connections are kept alive and shared.
 *
 * @example
 * ```ts
 * const client = new SandboxClient();            // $SANDBOX_HOST, or the local socket
 * const sb = await client.create({ tier: "S1" });
 * const r = await sb.exec(["sh", "-c", "echo hello"]);
 * console.log(r.exit_status, r.stdout?.toString());
 * await sb.remove();
 * ```
 */
export class SandboxClient {
  /** The service's address, as dialled (`unix:/…/serve.sock`, `https://host:port`). */
  readonly address: string;
  /** @internal */
  readonly transport: Transport;

  /**
   * @param options how to reach the service. The address is
   * `options.address`, else $SANDBOX_HOST (with $SANDBOX_TOKEN), else the
   * state directory's socket, as the CLI finds it.
   */
  constructor(options: ClientOptions = {}, transport?: Transport) {
    if (transport) {
      this.transport = transport;
    } else {
      const { endpoint, token } = resolveAddress(options);
      this.transport = new Transport({
        endpoint,
        ...(token !== undefined ? { token } : {}),
        ...(options.ca !== undefined ? { ca: options.ca } : {}),
        ...(options.rejectUnauthorized !== undefined ? { rejectUnauthorized: options.rejectUnauthorized } : {}),
        ...(options.policy !== undefined ? { policy: policyHeader(options.policy) } : {}),
        requestTimeoutMs: options.requestTimeoutMs ?? 120_000,
      });
    }
    this.address = this.transport.endpoint.display;
  }

  /**
   * A client whose every call asks the service to hold it to the policy
   * document `doc` as well as to its own authority (what `sandbox mcp`
   * does for a model's tool calls): any grant `doc` does not allow is
   * refused as denied. It shares this client's connections.
   */
  narrowed(doc: object | string | Uint8Array): SandboxClient {
    return new SandboxClient({}, this.transport.withPolicy(policyHeader(doc)));
  }

  /** Releases the client's connections. */
  close(): void {
    this.transport.close();
  }

  private getJSON<T>(path: string): Promise<T> {
    return this.transport.json<T>({ method: "GET", path });
  }
  private postJSON<T>(path: string, body?: unknown): Promise<T> {
    return this.transport.json<T>(
      body === undefined ? { method: "POST", path } : { method: "POST", path, body: JSON.stringify(body), contentType: "application/json" },
    );
  }

  // ---- the service ---------------------------------------------------

  /** GET /v1/health: whether the service answers, and how many sandboxes are live. */
  health(): Promise<Health> {
    return this.getJSON<Health>("/v1/health");
  }

  /** GET /v1/openapi.json: the API's OpenAPI 3.1 document. */
  openapi(): Promise<Record<string, unknown>> {
    return this.getJSON("/v1/openapi.json");
  }

  /** GET /metrics: Prometheus text. */
  async metrics(): Promise<string> {
    const res = await this.transport.send({ method: "GET", path: "/metrics" });
    return (await readAll(res)).toString("utf8");
  }

  /**
   * GET /v1/key: the key the service's host seals its runs and records
   * with (`ed25519:HEX`). It is what the service says of itself: check it
   * out of band (`sandbox key --public` on the host) before trusting what
   * it signs, and pin it (`verifyRun(r, { trust: key })`).
   */
  async hostKey(): Promise<string> {
    return (await this.getJSON<HostKey>("/v1/key")).key;
  }

  // ---- sandboxes -----------------------------------------------------

  /** POST /v1/sandboxes: makes a live sandbox. */
  async create(spec: SandboxSpec = {}): Promise<Sandbox> {
    return new Sandbox(this, await this.postJSON<SandboxInfo>("/v1/sandboxes", spec));
  }

  /** POST /v1/pools/{name}/claim: takes a ready sandbox of a warm pool; it is the caller's now. */
  async claim(pool: string): Promise<Sandbox> {
    return new Sandbox(this, await this.postJSON<SandboxInfo>("/v1/pools/" + encodeURIComponent(pool) + "/claim"));
  }

  /** GET /v1/pools: the service's warm pools and what each did. */
  pools(): Promise<Pool[]> {
    return this.getJSON<Pool[]>("/v1/pools");
  }

  /**
   * GET /v1/sandboxes: the caller's sandboxes, live then suspended, oldest first; on a host of a
   * cluster, then those the cluster keeps on its other hosts (`host` names the one holding each,
   * `state` may be `lost`). `here`: the host asked's alone (`?here=true`).
   */
  list(opts: { here?: boolean } = {}): Promise<SandboxInfo[]> {
    return this.getJSON<SandboxInfo[]>("/v1/sandboxes" + (opts.here ? "?here=true" : ""));
  }

  /** GET /v1/sandboxes/{id}: one of the caller's sandboxes, live or suspended (`state` says which). */
  get(id: string): Promise<SandboxInfo> {
    return this.getJSON<SandboxInfo>(p(id));
  }

  /** A handle on a sandbox by its id (nothing is sent). */
  sandbox(id: string): Sandbox {
    return new Sandbox(this, { id, tier: "", state: "live", created: "", execs: 0, running: 0, grants: [] });
  }

  /** DELETE /v1/sandboxes/{id}: ends a sandbox (a suspended one: closes its record). */
  async remove(id: string): Promise<void> {
    await this.transport.json({ method: "DELETE", path: p(id) });
  }

  /** POST /v1/sandboxes/{id}/suspend: parks a live sandbox; its workspace is kept by address. */
  suspend(id: string): Promise<Snapshot> {
    return this.postJSON<Snapshot>(p(id) + "/suspend");
  }

  /**
   * POST /v1/sandboxes/{id}/fork: makes `spec.count` (1 to MAX_FORK)
   * sandboxes from a sandbox's state; a live one runs on, a suspended one
   * stays so. Every child is in the answer, with its sandbox or the error
   * that stopped it: partial success rejects nothing.
   */
  fork(id: string, spec: ForkSpec): Promise<Forked> {
    return this.postJSON<Forked>(p(id) + "/fork", spec);
  }

  /**
   * POST /v1/sandboxes/{id}/ports: exposes `spec.port`, one of a live S1
   * or S5 sandbox's listen ports, through the service's TCP listener for
   * `spec.ttl_seconds` (1 to 86 400; absent or 0: an hour). Resolves with
   * the preview, its `url` (`https://HOST:PORT/preview/TOKEN/`) and
   * `token` said only here: whoever has the URL reaches the port, with no
   * bearer token, until it expires, is revoked or the sandbox is suspended
   * or closed. Nothing answering on the port, a service without a TCP
   * listener (`serve --listen`) or a sandbox of another tier rejects with
   * UnavailableError; a port it was not made with InvalidError; more than
   * 16 open previews LimitError.
   */
  exposePort(id: string, spec: PreviewSpec): Promise<Preview> {
    return this.postJSON<Preview>(p(id) + "/ports", spec);
  }

  /** GET /v1/sandboxes/{id}/ports: a live sandbox's open previews, by port and expiry, without their tokens and URLs. */
  async listPorts(id: string): Promise<Preview[]> {
    return (await this.getJSON<Previews>(p(id) + "/ports")).previews;
  }

  /**
   * DELETE /v1/sandboxes/{id}/ports/{port}: revokes every open preview of
   * `port` (each URL is 404 from now on, connections through it are cut)
   * and resolves with how many; none open rejects with NotFoundError.
   */
  async revokePort(id: string, port: number): Promise<number> {
    if (!Number.isInteger(port)) throw new TypeError(`a port is an integer (1 to 65535), not ${String(port)}`);
    return (await this.transport.json<Revoked>({ method: "DELETE", path: p(id) + "/ports/" + port })).revoked;
  }

  /**
   * POST /v1/sandboxes/{id}/resume: starts a suspended sandbox again (its
   * workspace at a new path). In a cluster the resumption may be placed on
   * another host; `here: true` resumes it on the host asked (on a single
   * host it changes nothing).
   */
  resume(id: string, opts: ResumeOptions = {}): Promise<SandboxInfo> {
    // Only `here=true` is sent: the service reads the parameter's presence.
    return this.postJSON<SandboxInfo>(p(id) + "/resume" + (opts.here ? "?here=true" : ""));
  }

  /** POST /v1/sandboxes/{id}/close: ends a sandbox's durable run, live (removed) or suspended (abandoned). */
  async closeRecord(id: string): Promise<void> {
    await this.postJSON(p(id) + "/close");
  }

  /** POST /v1/sandboxes/{id}/seed: seeds a live S1 sandbox's workspace with a git checkout. */
  seed(id: string, spec: SeedSpec): Promise<Seeded> {
    return this.postJSON<Seeded>(p(id) + "/seed", spec);
  }

  /** POST /v1/sandboxes/{id}/preservation: the passive preservation receipt of a seeded sandbox. */
  preservation(id: string, spec: ReceiptSpec): Promise<PreservationReceipt> {
    return this.postJSON<PreservationReceipt>(p(id) + "/preservation", spec);
  }

  /** GET /v1/records: the caller's sandboxes' run records, verified by the service. */
  records(): Promise<RecordInfo[]> {
    return this.getJSON<RecordInfo[]>("/v1/records");
  }

  // ---- exec and runs -------------------------------------------------

  /**
   * POST /v1/sandboxes/{id}/exec: runs a command in a live sandbox and
   * resolves with its sealed result (with its output collected, unless
   * callbacks take it). A non-zero exit resolves too: see `exit_status`.
   */
  exec(id: string, spec: ExecSpec, opts: CallOptions = {}): Promise<ExecResult> {
    return new ExecStream(this.transport, p(id) + "/exec", spec, opts, false).result;
  }

  /** The same exec, as an {@link ExecStream}: iterate it for the output as it comes; `result` is the sealed result. */
  execStream(id: string, spec: ExecSpec, opts: CallOptions = {}): ExecStream {
    return new ExecStream(this.transport, p(id) + "/exec", spec, opts, true);
  }

  /** POST /v1/runs: a one-shot sealed run (what `sandbox run` does), its output streamed. */
  run(spec: RunSpec, opts: CallOptions = {}): Promise<ExecResult> {
    return new ExecStream(this.transport, "/v1/runs", spec, opts, false).result;
  }

  /** The same one-shot run, as an {@link ExecStream}. */
  runStream(spec: RunSpec, opts: CallOptions = {}): ExecStream {
    return new ExecStream(this.transport, "/v1/runs", spec, opts, true);
  }

  /** POST /v1/interrupts/{key}: interrupts the caller's call in flight named `key`. */
  async interrupt(key: string): Promise<void> {
    await this.postJSON("/v1/interrupts/" + encodeURIComponent(key));
  }

  /** GET /v1/runs/{id}: a sealed run as the service verifies it against its own key. */
  getRun(run: string): Promise<RunReport> {
    return this.getJSON<RunReport>("/v1/runs/" + encodeURIComponent(run));
  }

  /**
   * GET /v1/runs/{id}/bundle: a run's sealed files (its run directory) as
   * the tar the service answers, unread. Refused past `opts.maxBytes`
   * (default 512 MiB). Read it with {@link parseRunBundle} or verify it
   * with {@link verifyRunBundle}: it is the service's word until verified.
   */
  async runBundle(run: string, opts: Pick<BundleLimits, "maxBytes"> = {}): Promise<Buffer> {
    const res = await this.transport.send({ method: "GET", path: "/v1/runs/" + encodeURIComponent(run) + "/bundle", noTimeout: true });
    return readAll(res, opts.maxBytes ?? BUNDLE_LIMITS.maxBytes);
  }

  /**
   * Verifies a sealed run offline, here: the attestation's signature over
   * its canonical claim, its address (the run id), the receipt's COSE
   * signature, every bound file by address, the journal and the outputs
   * (docs/spec/run-directory.md), under the keys you trust.
   *
   * **Which key.** Give the host's key you obtained out of band in
   * `opts.trust` (`sandbox key --public` on the host; pinned in your
   * configuration): the run then verifies only if that host sealed it.
   * Or opt in with `opts.trustServiceKey: true` to trust the key the
   * service publishes (GET /v1/key): that proves only that *the service
   * you are talking to* signed the run — a service (or whoever answers in
   * its place) that forged a run would publish its own key too. With
   * neither, it throws.
   *
   * **Where the files come from** (`opts.from`): `"directory"` reads the
   * run directory (`Result.records`, or the path given), which only the
   * service's own machine has; `"bundle"` fetches the run's files from the
   * service (GET /v1/runs/{id}/bundle), read in memory as hostile input
   * ({@link parseRunBundle}; a bundle that cannot be read is a failed
   * verification with file `bundle`). `"auto"` (the default): a path is
   * read as a directory; a result on a unix socket reads its directory
   * when it can, else the bundle; over TCP always the bundle.
   * `RunVerification.source` says which.
   *
   * @param run a result (its `run` id expected, its `records` directory
   * read when local), a run id `b3:…` (its bundle), or a run directory's path
   * @param opts the keys to trust, where to read, and the bundle's bounds
   */
  async verifyRun(run: Pick<Result, "run" | "records"> | string, opts: VerifyRunOptions = {}): Promise<RunVerification> {
    if (opts.trust === undefined && !opts.trustServiceKey) {
      throw new SandboxError(
        "verifyRun: no key to trust: pass { trust: KEY } (the host's key, from `sandbox key --public` on it, checked out of band) or opt in with { trustServiceKey: true } (proves only that this service signed the run)",
      );
    }
    const isId = typeof run === "string" && run.startsWith("b3:");
    const dir = typeof run === "string" ? (isId ? undefined : run) : run.records;
    const id = typeof run === "string" ? (isId ? run : undefined) : run.run;
    const from = opts.from ?? "auto";
    let source: "directory" | "bundle";
    if (from === "directory" || (from === "auto" && typeof run === "string" && !isId)) source = "directory";
    else if (from === "bundle" || this.transport.endpoint.kind === "tcp" || !dir) source = "bundle";
    else source = (await readable(dir)) ? "directory" : "bundle";

    const trust = async (): Promise<string[]> => {
      const pinned = opts.trust === undefined ? [] : [...trustSet(opts.trust)];
      return opts.trustServiceKey ? [...pinned, await this.hostKey()] : pinned;
    };
    const rest: RunVerifyOptions = { ...(opts.allowUntrusted !== undefined ? { allowUntrusted: opts.allowUntrusted } : {}) };
    let v: RunVerification;
    if (source === "directory") {
      if (!dir) throw new SandboxError("verifyRun: the result names no run directory (`records`) to read");
      let names: string[];
      try {
        names = await readdir(dir);
      } catch (err) {
        throw new SandboxError(
          `cannot read the run's records at ${dir} (${(err as Error).message}): a run directory is on the service's machine; verify from its bundle instead ({ from: "bundle" })`,
          { cause: err },
        );
      }
      const files: RunFiles = {};
      for (const n of names) files[n] = new Uint8Array(await readFile(join(dir, n)));
      const expectRun = opts.expectRun ?? id;
      v = verifyRunFiles(files, { ...rest, trust: await trust(), ...(expectRun ? { expectRun } : {}) });
    } else {
      const want = opts.expectRun ?? id;
      if (!want) throw new SandboxError("verifyRun: no run id to fetch the bundle of (give a result with `run`, or `b3:…`)");
      // Both asked at once, and both answered before this settles.
      const [tar, keys] = await Promise.allSettled([this.runBundle(want, bundleLimits(opts)), trust()]);
      if (tar.status === "rejected") throw tar.reason;
      if (keys.status === "rejected") throw keys.reason;
      v = verifyRunBundle(tar.value, { ...rest, trust: keys.value, expectRun: want });
    }
    v.source = source;
    return v;
  }

  // ---- files ---------------------------------------------------------

  /**
   * PUT /v1/sandboxes/{id}/files: writes `data` to `path` in a live sandbox
   * (under a read-write grant; written beside and renamed into place).
   * Resolves with the size written.
   */
  async upload(id: string, path: string, data: Body, opts: { mode?: number } = {}): Promise<number> {
    const mode = (opts.mode ?? 0o644).toString(8);
    const r = await this.transport.json<{ size: number }>({
      method: "PUT",
      path: filesPath(id, path, { mode }),
      body: data ?? new Uint8Array(0),
      contentType: "application/octet-stream",
    });
    return r.size;
  }

  /** GET /v1/sandboxes/{id}/files: reads file `path` of a live sandbox. */
  async download(id: string, path: string): Promise<Buffer> {
    const res = await this.transport.send({ method: "GET", path: filesPath(id, path) });
    const b = await readAll(res);
    const want = res.headers["content-length"];
    if (want !== undefined && Number(want) !== b.length) throw new SandboxError(`${path}: got ${b.length} of ${want} bytes`);
    return b;
  }

  /** GET /v1/sandboxes/{id}/files: file `path` of a live sandbox as a stream, for large files. */
  async downloadStream(id: string, path: string): Promise<Readable> {
    return this.transport.send({ method: "GET", path: filesPath(id, path), noTimeout: true });
  }

  /** GET /v1/sandboxes/{id}/files?list=1: lists directory `path` of a live sandbox. */
  listFiles(id: string, path: string): Promise<FileInfo[]> {
    return this.getJSON<FileInfo[]>(filesPath(id, path, { list: "1" }));
  }

  /**
   * GET /v1/sandboxes/{id}/watch: the changes under directory `path` of a live sandbox, each given to `onEvent`
   * (first `watching`: the watch is in place; then create, modify, delete, rename with `from`, overflow); resolves
   * with the last event: `ended` when the sandbox was suspended, closed or removed, or the one after which `onEvent`
   * returned false.
   */
  watch(id: string, path: string, onEvent: (e: WatchEvent) => boolean | void, opts: WatchOptions = {}): Promise<WatchEvent> {
    const q = new URLSearchParams({ path });
    if (opts.recursive) q.set("recursive", "true");
    return watchCall(this.transport, p(id) + "/watch?" + q.toString(), onEvent, opts);
  }

  // ---- fleets ----------------------------------------------------------

  /** POST /v1/fleets: runs a fleet across the service's workers, telling progress, and resolves once it is sealed. */
  fleet(spec: FleetSpec, opts: FleetOptions = {}): Promise<FleetResult> {
    return fleetCall(this.transport, spec, opts);
  }

  // ---- JCP (thin wrappers: every token is signed on the caller's side) --

  /** GET /v1/jcp: the service's host key and the JCP root keys it trusts. */
  jcpInfo(): Promise<JCPInfo> {
    return this.getJSON<JCPInfo>("/v1/jcp");
  }

  /** GET /v1/jcp/ledger: every admitted grant's budget, and the head (the operator only). */
  jcpLedger(): Promise<JCPLedger> {
    return this.getJSON<JCPLedger>("/v1/jcp/ledger");
  }

  /** POST /v1/jcp/ledger/verify: the ledger replayed from its genesis (the operator only); a ledger that does not verify is a report with its refusal. */
  jcpVerifyLedger(): Promise<JCPLedgerReport> {
    return this.postJSON<JCPLedgerReport>("/v1/jcp/ledger/verify", {});
  }

  /** POST /v1/jcp/chains/verify: verifies a chain (envelopes root first); a refusal is `ok: false`, not an error. */
  jcpVerifyChain(chain: BytesLike[]): Promise<JCPChain> {
    return this.postJSON<JCPChain>("/v1/jcp/chains/verify", { chain: chain.map(envelopeB64) });
  }

  /** POST /v1/jcp/chains: verifies a chain and admits its grants to the ledger; a refusal is a DeniedError with its `code`. */
  jcpAdmit(chain: BytesLike[]): Promise<JCPChain> {
    return this.postJSON<JCPChain>("/v1/jcp/chains", { chain: chain.map(envelopeB64) });
  }

  /** POST /v1/jcp/chains/budget: each grant's budget, root first. */
  jcpBudgets(chain: BytesLike[]): Promise<JCPBudget[]> {
    return this.postJSON<JCPBudget[]>("/v1/jcp/chains/budget", { chain: chain.map(envelopeB64) });
  }

  /** POST /v1/jcp/revocations: records a revocation of a grant of `chain`. */
  jcpRevoke(chain: BytesLike[], revocation: BytesLike): Promise<JCPRecorded> {
    return this.postJSON<JCPRecorded>("/v1/jcp/revocations", { chain: chain.map(envelopeB64), revocation: envelopeB64(revocation) });
  }

  /** POST /v1/jcp/amendments: records an amendment (narrowing only) of a grant of `chain`. */
  jcpAmend(chain: BytesLike[], amendment: BytesLike): Promise<JCPRecorded> {
    return this.postJSON<JCPRecorded>("/v1/jcp/amendments", { chain: chain.map(envelopeB64), amendment: envelopeB64(amendment) });
  }

  /** POST /v1/jcp/policies: admits a mint policy (`chain` ends with it; its minter is the service's key). */
  jcpPolicy(chain: BytesLike[]): Promise<JCPChain> {
    return this.postJSON<JCPChain>("/v1/jcp/policies", { chain: chain.map(envelopeB64) });
  }

  /** POST /v1/jcp/events: posts the named event; the service mints under every policy naming it (the operator only). */
  jcpEvent(name: string): Promise<JCPEvent> {
    return this.postJSON<JCPEvent>("/v1/jcp/events", { name });
  }

  /** POST /v1/jcp/checkpoints: records a checkpoint (signed by the grant's audience) of a grant of `chain`. */
  jcpCheckpoint(chain: BytesLike[], checkpoint: BytesLike): Promise<JCPRecorded> {
    return this.postJSON<JCPRecorded>("/v1/jcp/checkpoints", { chain: chain.map(envelopeB64), checkpoint: envelopeB64(checkpoint) });
  }
}

/**
 * A handle on one sandbox: its id, what the service last said of it
 * (`info`), and the operations on it.
 */
export class Sandbox {
  /** The sandbox's id, `sb-…`. */
  readonly id: string;
  /** What the service last said of it (updated by {@link Sandbox.refresh} and {@link Sandbox.resume}). */
  info: SandboxInfo;
  /** The client it belongs to. */
  readonly client: SandboxClient;

  /** @internal Made by {@link SandboxClient.create}, {@link SandboxClient.claim} or {@link SandboxClient.sandbox}. */
  constructor(client: SandboxClient, info: SandboxInfo) {
    this.client = client;
    this.info = info;
    this.id = info.id;
  }

  /** Its workspace's path (granted read-write; where execs start). A resumption moves it. */
  get workspace(): string | undefined {
    return this.info.workspace;
  }

  /** Reads it again from the service. */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.client.get(this.id);
    return this.info;
  }

  /** Runs a command (args, or a whole {@link ExecSpec}) and resolves with its sealed result and output. */
  exec(cmd: string[] | ExecSpec, opts: CallOptions = {}): Promise<ExecResult> {
    return this.client.exec(this.id, Array.isArray(cmd) ? { args: cmd } : cmd, opts);
  }

  /** Runs a command as an {@link ExecStream}: iterate it for the output as it comes. */
  execStream(cmd: string[] | ExecSpec, opts: CallOptions = {}): ExecStream {
    return this.client.execStream(this.id, Array.isArray(cmd) ? { args: cmd } : cmd, opts);
  }

  /** Writes `data` to `path` (absolute, under a read-write grant); resolves with the size written. */
  upload(path: string, data: Body, opts: { mode?: number } = {}): Promise<number> {
    return this.client.upload(this.id, path, data, opts);
  }

  /** Reads file `path`. */
  download(path: string): Promise<Buffer> {
    return this.client.download(this.id, path);
  }

  /** Reads file `path` as a stream. */
  downloadStream(path: string): Promise<Readable> {
    return this.client.downloadStream(this.id, path);
  }

  /** Lists directory `path`. */
  listFiles(path: string): Promise<FileInfo[]> {
    return this.client.listFiles(this.id, path);
  }

  /** Parks it: its workspace kept by address, its processes ended (S1). */
  async suspend(): Promise<Snapshot> {
    const s = await this.client.suspend(this.id);
    this.info = { ...this.info, state: "suspended" };
    return s;
  }

  /** Makes `count` sandboxes from its state (SandboxClient.fork); it runs on. */
  fork(count: number, opts: { suspended?: boolean } = {}): Promise<Forked> {
    return this.client.fork(this.id, { count, ...(opts.suspended ? { suspended: true } : {}) });
  }

  /** Exposes one of its listen ports (SandboxClient.exposePort): the preview, with its URL. */
  exposePort(port: number, opts: Omit<PreviewSpec, "port"> = {}): Promise<Preview> {
    return this.client.exposePort(this.id, { ...opts, port });
  }

  /** Its open previews (SandboxClient.listPorts). */
  listPorts(): Promise<Preview[]> {
    return this.client.listPorts(this.id);
  }

  /** Revokes the open previews of `port` (SandboxClient.revokePort); resolves with how many. */
  revokePort(port: number): Promise<number> {
    return this.client.revokePort(this.id, port);
  }

  /** Starts it again after a suspension (its workspace at a new path); `here`: on the host asked, in a cluster. */
  async resume(opts: ResumeOptions = {}): Promise<SandboxInfo> {
    this.info = await this.client.resume(this.id, opts);
    return this.info;
  }

  /** Ends its durable run: removed if live, abandoned if suspended. */
  close(): Promise<void> {
    return this.client.closeRecord(this.id);
  }

  /** Ends it (DELETE). */
  remove(): Promise<void> {
    return this.client.remove(this.id);
  }

  /** Seeds its workspace with a git checkout (S1). */
  seed(spec: SeedSpec): Promise<Seeded> {
    return this.client.seed(this.id, spec);
  }

  /** Its passive preservation receipt for a claim, source and incarnation. */
  preservation(spec: ReceiptSpec): Promise<PreservationReceipt> {
    return this.client.preservation(this.id, spec);
  }
}
