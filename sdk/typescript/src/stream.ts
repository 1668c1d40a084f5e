// Streamed calls: an exec or a one-shot run answers NDJSON frames
// (`{"stdout": b64}`, `{"stderr": b64}`, then one `{"result"}` or
// `{"error"}`); a fleet answers `{"progress"}` frames then `{"fleet"}` or
// `{"error"}` (docs/api.md "Streams"). A call is never tied to its
// connection: a deadline, an abort or a failing output callback asks the
// service to interrupt it by its key, and the sealed result is still read
// (for at most the interrupt wait, after which the connection is dropped).

import { randomBytes } from "node:crypto";
import type http from "node:http";
import { Readable } from "node:stream";
import {
  AbortError,
  apiError,
  CallEndedError,
  NoResultError,
  NotFoundError,
  OutputError,
  SandboxError,
  TimeoutError,
  type APIErrorBody,
} from "./errors.js";
import { STDIN_STREAM_TYPE, type Body, type Transport } from "./transport.js";
import type { BytesLike, ExecResult, FleetResult, FleetSpec, Result, RunSpec, WatchEvent } from "./types.js";

/** How long a call whose deadline passed (or that was aborted) waits for its sealed result: the Go client's InterruptWait. */
export const DEFAULT_INTERRUPT_WAIT_MS = 15_000;

/** The HTTP status of each category, for an error that came as a frame (internal/errs). */
const STATUS_OF: Record<string, number> = {
  internal: 500,
  invalid: 400,
  "not-found": 404,
  integrity: 422,
  untrusted: 403,
  denied: 403,
  unavailable: 503,
  canceled: 499,
  limit: 429,
};

/** Options of an exec or a run, beyond what the service is sent. */
export interface CallOptions {
  /** Given each piece of stdout as it comes. If it throws, the call is interrupted and rejects with an {@link OutputError}. */
  onStdout?: (chunk: Buffer) => void;
  /** Given each piece of stderr as it comes (likewise). */
  onStderr?: (chunk: Buffer) => void;
  /**
   * Collect the output into the result's `stdout` and `stderr` Buffers.
   * Default: true for a stream that has no callback (and, for
   * {@link ExecStream}, is not iterated).
   */
  collect?: boolean;
  /**
   * A client-side deadline, ms: when it passes, the call is interrupted by
   * its key and rejects with a {@link TimeoutError} carrying the sealed
   * result. (The service's own `deadline_ms` ends the program with
   * outcome `deadline` and resolves.)
   */
  timeoutMs?: number;
  /** Aborting it interrupts the call, which rejects with an {@link AbortError} carrying the sealed result. */
  signal?: AbortSignal;
  /** How long an interrupted call waits for its sealed result before dropping the connection (default 15 000 ms). */
  interruptWaitMs?: number;
}

/** A piece of a program's output. */
export interface OutputChunk {
  /** Which stream it was written to. */
  stream: "stdout" | "stderr";
  /** The bytes. */
  data: Buffer;
}

/** A fresh interrupt key: 32 hex digits. */
export function newInterruptKey(): string {
  return randomBytes(16).toString("hex");
}

function b64(b: BytesLike): string {
  return (typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b.buffer, b.byteOffset, b.byteLength)).toString("base64");
}

/** A JCP envelope: bytes are base64-encoded; a string is taken as base64 already. */
export function envelopeB64(b: BytesLike): string {
  return typeof b === "string" ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");
}

function isStream(x: unknown): x is AsyncIterable<Uint8Array | string> {
  return typeof x === "object" && x !== null && !(x instanceof Uint8Array) && (Symbol.asyncIterator in x || x instanceof Readable);
}

/** The body the service is sent for a spec: JSON, or a JSON line then the stdin stream. */
export function encodeCall(spec: RunSpec, key: string): { body: Body; contentType: string; prefix?: Uint8Array } {
  const w: Record<string, unknown> = { args: spec.args };
  const copy = ["env", "dir", "deadline_ms", "grants", "grants_json", "tier", "escalate", "image", "limits"] as const;
  for (const k of copy) if (spec[k] !== undefined) w[k] = spec[k];
  w.interrupt_key = key;
  if (spec.jcp) w.jcp = { chain: spec.jcp.chain.map(envelopeB64), invocation: envelopeB64(spec.jcp.invocation) };
  const stdin = spec.stdin;
  if (isStream(stdin)) {
    const line = Buffer.from(JSON.stringify(w) + "\n");
    return { body: stdin as Body, contentType: STDIN_STREAM_TYPE, prefix: line };
  }
  if (stdin !== undefined) w.stdin = b64(stdin as BytesLike);
  return { body: JSON.stringify(w), contentType: "application/json" };
}

/** Splits a response into NDJSON lines and gives each parsed object to `frame`. */
function readFrames(res: http.IncomingMessage, frame: (f: Record<string, unknown>) => void, end: (err?: Error) => void): void {
  let pending: Buffer[] = [];
  let ended = false;
  const finish = (err?: Error) => {
    if (ended) return;
    ended = true;
    end(err);
  };
  res.on("data", (chunk: Buffer) => {
    let start = 0;
    for (let i = chunk.indexOf(0x0a); i >= 0; i = chunk.indexOf(0x0a, start)) {
      pending.push(chunk.subarray(start, i));
      start = i + 1;
      const line = Buffer.concat(pending);
      pending = [];
      if (line.length === 0) continue;
      let f: Record<string, unknown>;
      try {
        f = JSON.parse(line.toString("utf8")) as Record<string, unknown>;
      } catch (err) {
        finish(new SandboxError(`a malformed frame from the service: ${(err as Error).message}`));
        res.destroy();
        return;
      }
      frame(f);
      if (ended) return;
    }
    if (start < chunk.length) pending.push(chunk.subarray(start));
  });
  res.on("end", () => finish());
  res.on("error", (err) => finish(err));
  res.on("close", () => {
    if (!res.complete) finish(new SandboxError("the connection broke mid-stream"));
  });
}

/**
 * A streamed exec or run in flight. Iterate it (`for await (const c of
 * call)`) for its output as it comes, or give callbacks; `result` is its
 * sealed result. `interrupt()` asks the service to interrupt it: the
 * program gets SIGINT (SIGKILL after 2 s) and `result` still resolves,
 * with the run sealed as interrupted.
 */
export class ExecStream implements AsyncIterable<OutputChunk> {
  /** The key the call is named by (its `interrupt_key`). */
  readonly interruptKey: string;
  /** The sealed result: resolves when the stream ends with one, rejects with a typed error otherwise. */
  readonly result: Promise<ExecResult>;

  private readonly transport: Transport;
  private readonly opts: CallOptions;
  private readonly queue: (OutputChunk | null)[] = [];
  private waiter: (() => void) | undefined;
  private failure: Error | undefined;
  private iterating = false;
  private consuming = false;
  private res: http.IncomingMessage | undefined;
  private req: http.ClientRequest | undefined;
  private settled = false;
  private ending: { ctor: new (m: string, k: string, r?: Result, c?: unknown) => CallEndedError; message: string; cause?: unknown } | undefined;
  private timers: NodeJS.Timeout[] = [];
  private readonly collected: { stdout: Buffer[]; stderr: Buffer[] } | undefined;
  private resolveResult!: (r: ExecResult) => void;
  private rejectResult!: (e: Error) => void;
  private readonly onAbort = () => this.end(AbortError, "the call was aborted by its signal", this.opts.signal?.reason);

  /** @internal Made by {@link SandboxClient.execStream} and {@link SandboxClient.runStream}. */
  constructor(transport: Transport, path: string, spec: RunSpec, opts: CallOptions, iterate: boolean) {
    this.transport = transport;
    this.opts = opts;
    this.iterating = iterate;
    this.interruptKey = spec.interrupt_key ?? newInterruptKey();
    const collect = opts.collect ?? (!iterate && !opts.onStdout && !opts.onStderr);
    this.collected = collect ? { stdout: [], stderr: [] } : undefined;
    this.result = new Promise<ExecResult>((ok, bad) => {
      this.resolveResult = ok;
      this.rejectResult = bad;
    });
    // A caller that only iterates still gets the error through the iterator.
    this.result.catch(() => undefined);
    if (opts.signal?.aborted) {
      this.ending = { ctor: AbortError, message: "the call was aborted by its signal before it was sent", cause: opts.signal.reason };
      this.settle();
      return;
    }
    opts.signal?.addEventListener("abort", this.onAbort, { once: true });
    if (opts.timeoutMs !== undefined && opts.timeoutMs >= 0) {
      this.timers.push(setTimeout(() => this.end(TimeoutError, `the call's deadline (${opts.timeoutMs} ms) passed`), opts.timeoutMs));
    }
    let enc: ReturnType<typeof encodeCall>;
    try {
      enc = encodeCall(spec, this.interruptKey);
    } catch (err) {
      this.settle(err as Error);
      return;
    }
    const req = { method: "POST", path, body: enc.body, contentType: enc.contentType, noTimeout: true, ...(enc.prefix ? { prefix: enc.prefix } : {}) };
    this.transport
      .send(req, (r) => {
        this.req = r;
      })
      .then(
        (res) => this.stream(res),
        (err: Error) => this.settle(err),
      );
  }

  private stream(res: http.IncomingMessage): void {
    this.res = res;
    if (this.settled) {
      res.destroy();
      return;
    }
    readFrames(
      res,
      (f) => {
        if (f.error !== undefined && f.error !== null) {
          const body = f.error as APIErrorBody;
          this.settle(apiError(STATUS_OF[body.category] ?? 500, body, true));
        } else if (f.result !== undefined && f.result !== null) {
          this.settle(undefined, f.result as Result);
        } else {
          if (typeof f.stdout === "string") this.output("stdout", Buffer.from(f.stdout, "base64"));
          if (typeof f.stderr === "string") this.output("stderr", Buffer.from(f.stderr, "base64"));
        }
      },
      (err) => this.settle(err ?? new NoResultError()),
    );
  }

  private output(stream: "stdout" | "stderr", data: Buffer): void {
    if (data.length === 0 || this.settled) return;
    const cb = stream === "stdout" ? this.opts.onStdout : this.opts.onStderr;
    if (cb) {
      if (this.ending?.ctor === OutputError) return;
      try {
        cb(data);
      } catch (err) {
        this.end(OutputError, `the ${stream} callback threw: the call was interrupted`, err);
      }
    }
    this.collected?.[stream].push(data);
    if (this.iterating) {
      this.queue.push({ stream, data });
      // Backpressure only while someone iterates: a caller that awaits
      // `result` without iterating must still get it.
      if (this.consuming && this.queue.length >= 256) this.res?.pause();
      this.wake();
    }
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** Ends the call from this side: interrupt by key, then wait (bounded) for the sealed result. */
  private end(ctor: NonNullable<ExecStream["ending"]>["ctor"], message: string, cause?: unknown): void {
    if (this.settled || this.ending) return;
    this.ending = { ctor, message, cause };
    const wait = this.opts.interruptWaitMs ?? DEFAULT_INTERRUPT_WAIT_MS;
    this.timers.push(
      setTimeout(() => {
        if (this.settled) return;
        this.req?.destroy();
        this.res?.destroy();
        this.settle(new NoResultError(`no sealed result within ${wait} ms of asking the service to interrupt the call`));
      }, wait),
    );
    void this.askInterrupt(wait);
  }

  private async askInterrupt(wait: number): Promise<void> {
    const deadline = Date.now() + wait;
    // Not in flight: not yet (the service has not read the call) or no
    // longer (its result is on its way). Asked again for a moment; then
    // the connection is dropped, and the service seals what it started.
    for (let attempt = 0; !this.settled; attempt++) {
      try {
        await this.transport.json({ method: "POST", path: "/v1/interrupts/" + encodeURIComponent(this.interruptKey) });
        return;
      } catch (err) {
        if (this.settled) return;
        if (!(err instanceof NotFoundError) || attempt >= 20 || Date.now() > deadline) {
          this.req?.destroy();
          this.res?.destroy();
          this.settle(new NoResultError(`the call could not be interrupted: ${(err as Error).message}`));
          return;
        }
        await new Promise((ok) => setTimeout(ok, 100));
      }
    }
  }

  /** Asks the service to interrupt the call now; the result still comes (sealed as interrupted). */
  async interrupt(): Promise<void> {
    if (this.settled) return;
    await this.transport.json({ method: "POST", path: "/v1/interrupts/" + encodeURIComponent(this.interruptKey) });
  }

  private settle(err?: Error, result?: Result): void {
    if (this.settled) return;
    this.settled = true;
    for (const t of this.timers) clearTimeout(t);
    this.opts.signal?.removeEventListener("abort", this.onAbort);
    if (this.res && !this.res.complete) this.res.destroy();
    let out: ExecResult | undefined;
    if (result) {
      out = { ...result };
      if (this.collected) {
        out.stdout = Buffer.concat(this.collected.stdout);
        out.stderr = Buffer.concat(this.collected.stderr);
      }
    }
    if (this.ending) {
      const e = new this.ending.ctor(
        `${this.ending.message}${out ? "; its sealed result came" : err ? `; ${err.message}` : ""}`,
        this.interruptKey,
        out,
        this.ending.cause ?? err,
      );
      err = e;
    }
    if (err) {
      this.failure = err;
      this.rejectResult(err);
    } else this.resolveResult(out!);
    this.queue.push(null);
    this.wake();
  }

  /**
   * The output as it comes, until the call ends; the iteration throws the
   * call's error, if it fails. Output is buffered from the start of the
   * call until it is iterated. Leaving the loop early stops buffering; the
   * call goes on, and `result` still resolves.
   */
  async *[Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    this.iterating = true;
    this.consuming = true;
    try {
      for (;;) {
        const next = this.queue.shift();
        if (next === null) {
          if (this.failure) throw this.failure;
          return;
        }
        if (next) {
          if (this.queue.length < 64 && this.res?.isPaused()) this.res.resume();
          yield next;
          continue;
        }
        await new Promise<void>((ok) => {
          this.waiter = ok;
        });
      }
    } finally {
      this.consuming = false;
      if (!this.settled) {
        this.iterating = false;
        this.queue.length = 0;
      }
      if (this.res?.isPaused()) this.res.resume();
    }
  }
}

/** Options of a fleet. */
export interface FleetOptions {
  /** Told each time items end: at most about 200 times, and at the last. */
  onProgress?: (done: number, total: number) => void;
  /** Aborting it drops the connection, which ends the fleet in the service; the call rejects with an {@link AbortError}. */
  signal?: AbortSignal;
}

/** Runs a fleet and reads its frames. */
export function fleetCall(transport: Transport, spec: FleetSpec, opts: FleetOptions = {}): Promise<FleetResult> {
  return streamCall<FleetResult>(
    transport,
    { method: "POST", path: "/v1/fleets", body: JSON.stringify(spec), contentType: "application/json", noTimeout: true },
    "the fleet",
    opts.signal,
    (res, finish) =>
      readFrames(
        res,
        (f) => {
          if (f.error) {
            const body = f.error as APIErrorBody;
            finish(apiError(STATUS_OF[body.category] ?? 500, body, true));
          } else if (f.fleet) finish(undefined, f.fleet as FleetResult);
          else if (f.progress && opts.onProgress) {
            const p = f.progress as { done: number; total: number };
            try {
              opts.onProgress(p.done, p.total);
            } catch (err) {
              finish(err as Error);
              res.destroy();
            }
          }
        },
        (err) => finish(err ?? new NoResultError("the fleet's stream ended without its result")),
      ),
  );
}

/**
 * streamCall sends req and hands its response to read, which calls finish once with the call's end; the signal
 * aborting it drops the connection and rejects with an {@link AbortError} naming what.
 */
function streamCall<T>(
  transport: Transport,
  req: Parameters<Transport["send"]>[0],
  what: string,
  signal: AbortSignal | undefined,
  read: (res: http.IncomingMessage, finish: (err?: Error, v?: T) => void) => void,
): Promise<T> {
  return new Promise((ok, bad) => {
    let sent: http.ClientRequest | undefined;
    let done = false;
    const finish = (err?: Error, v?: T) => {
      if (done) return;
      done = true;
      signal?.removeEventListener("abort", onAbort);
      if (err) bad(err);
      else ok(v!);
    };
    const onAbort = () => {
      finish(new AbortError(what + " was aborted by its signal", "", undefined, signal?.reason));
      sent?.destroy();
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    transport
      .send(req, (r) => {
        sent = r;
      })
      .then(
        (res) => {
          if (done) return void res.destroy();
          read(res, (err, v) => {
            if (!done) finish(err, v);
          });
        },
        (err: Error) => finish(err),
      );
  });
}

/** What a watch takes besides its directory. */
export interface WatchOptions {
  /** Follow every directory beneath it too (`?recursive=true`). */
  recursive?: boolean;
  /** Aborting it drops the connection, which ends the watch; the call rejects with an {@link AbortError}. */
  signal?: AbortSignal;
}

/**
 * GET /v1/sandboxes/{id}/watch: calls `onEvent` with each event (first `watching`: the watch is in place) and
 * resolves with the last: `ended` (the sandbox was suspended, closed or removed, `why`), or the one after which
 * `onEvent` returned false.
 */
export function watchCall(
  transport: Transport,
  path: string,
  onEvent: (e: WatchEvent) => boolean | void,
  opts: WatchOptions = {},
): Promise<WatchEvent> {
  return streamCall<WatchEvent>(transport, { method: "GET", path, noTimeout: true }, "the watch", opts.signal, (res, finish) => {
    let ended = false;
    const end = (err?: Error, e?: WatchEvent) => {
      ended = true;
      finish(err, e);
      res.destroy();
    };
    readFrames(
      res,
      (f) => {
        if (ended) return;
        if (typeof f.op !== "string") return end(new NoResultError("a watch event without its op"));
        const e = f as unknown as WatchEvent;
        let more: boolean | void;
        try {
          more = onEvent(e);
        } catch (err) {
          return end(err as Error);
        }
        if (more === false || e.op === "ended") end(undefined, e);
      },
      (err) => finish(err ?? new NoResultError("the watch's stream ended without its end")),
    );
  });
}
