// Finding the service and talking HTTP to it: its unix socket (node:http
// with socketPath) or https://HOST:PORT with a bearer token and an
// optional CA, as the Go client's Dial does.

import http from "node:http";
import https from "node:https";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { apiError, ConnectionError, InternalError, SandboxError, type APIErrorBody } from "./errors.js";

/** The service's socket in the state directory. */
export const SOCKET_NAME = "serve.sock";

/** The request header in which a caller asks to be held to a narrower policy (docs/api.md "Authority"). */
export const POLICY_HEADER = "Sandbox-Policy";

/** The content type of a call whose stdin streams: the spec as one JSON line, then the stdin's bytes. */
export const STDIN_STREAM_TYPE = "application/x-sandbox-exec-stream";

/** Where the service is. */
export type Endpoint =
  | { kind: "unix"; socketPath: string; display: string }
  | { kind: "tcp"; url: URL; secure: boolean; display: string };

/** Options of {@link stateDir}: the environment to read (process.env by default). */
export type Env = Record<string, string | undefined>;

/**
 * The state directory as the service and the CLI find it: $SANDBOX_HOME,
 * else $XDG_STATE_HOME/sandbox (when absolute), else
 * $HOME/.local/state/sandbox.
 */
export function stateDir(env: Env = process.env): string {
  if (env.SANDBOX_HOME) return resolve(env.SANDBOX_HOME);
  if (env.XDG_STATE_HOME && isAbsolute(env.XDG_STATE_HOME)) return join(env.XDG_STATE_HOME, "sandbox");
  const home = env.HOME || homedir();
  if (home) return join(home, ".local", "state", "sandbox");
  throw new SandboxError("no state directory: set SANDBOX_HOME or SANDBOX_HOST");
}

/**
 * Parses an address: a unix socket's path (absolute), `unix:PATH`, or an
 * `https://HOST:PORT` URL (`http://` is accepted too, for a proxy the
 * caller trusts; the service itself serves TCP only with TLS).
 */
export function parseAddress(addr: string): Endpoint {
  if (addr.startsWith("unix:") || addr.startsWith("/")) {
    const p = addr.startsWith("unix:") ? addr.slice(5) : addr;
    if (!p) throw new SandboxError(`${JSON.stringify(addr)}: an empty socket path`);
    return { kind: "unix", socketPath: p, display: "unix:" + p };
  }
  let u: URL;
  try {
    u = new URL(addr);
  } catch {
    throw new SandboxError(`${JSON.stringify(addr)}: want a unix socket path, unix:PATH, or https://HOST:PORT`);
  }
  if ((u.protocol !== "https:" && u.protocol !== "http:") || !u.host) {
    throw new SandboxError(`${JSON.stringify(addr)}: want a unix socket path, unix:PATH, or https://HOST:PORT`);
  }
  return { kind: "tcp", url: u, secure: u.protocol === "https:", display: u.origin };
}

/** What the transport needs. */
export interface TransportOptions {
  endpoint: Endpoint;
  token?: string;
  ca?: string | Buffer | Array<string | Buffer>;
  rejectUnauthorized?: boolean;
  policy?: string;
  requestTimeoutMs: number;
}

/** A request's body: bytes, or a stream written as it comes (chunked). */
export type Body = Uint8Array | string | Readable | AsyncIterable<Uint8Array | string> | undefined;

/** A request. */
export interface Req {
  method: string;
  path: string;
  body?: Body;
  contentType?: string;
  /** Prepended to a streamed body (a stdin stream's JSON line). */
  prefix?: Uint8Array;
  /** No client-side timeout (streams have their own). */
  noTimeout?: boolean;
  signal?: AbortSignal;
}

/** The HTTP side of a client: one keep-alive agent, shared by narrowed copies. */
export class Transport {
  readonly endpoint: Endpoint;
  private readonly agent: http.Agent;
  private readonly o: TransportOptions;

  constructor(o: TransportOptions, agent?: http.Agent) {
    this.o = o;
    this.endpoint = o.endpoint;
    if (agent) this.agent = agent;
    else if (o.endpoint.kind === "tcp" && o.endpoint.secure) {
      const ao: https.AgentOptions = { keepAlive: true, maxSockets: 64 };
      if (o.ca !== undefined) ao.ca = o.ca;
      if (o.rejectUnauthorized !== undefined) ao.rejectUnauthorized = o.rejectUnauthorized;
      this.agent = new https.Agent(ao);
    } else this.agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  }

  /** A transport like this one, with another policy header, sharing its connections. */
  withPolicy(policy: string | undefined): Transport {
    return new Transport({ ...this.o, ...(policy === undefined ? {} : { policy }) }, this.agent);
  }

  /** Releases idle connections. */
  close(): void {
    this.agent.destroy();
  }

  /**
   * Sends a request; resolves with the response once its head is in. A
   * status of 400 or more is turned into the typed error of its body.
   * `onRequest` is given the request as it is sent (to destroy it later).
   */
  send(r: Req, onRequest?: (req: http.ClientRequest) => void): Promise<http.IncomingMessage> {
    const headers: Record<string, string> = { Accept: "application/json, application/x-ndjson" };
    if (r.contentType) headers["Content-Type"] = r.contentType;
    if (this.o.token) headers["Authorization"] = "Bearer " + this.o.token;
    if (this.o.policy) headers[POLICY_HEADER] = this.o.policy;
    const e = this.endpoint;
    const fixed = r.body === undefined || typeof r.body === "string" || r.body instanceof Uint8Array;
    const bodyBytes = r.body === undefined ? undefined : typeof r.body === "string" ? Buffer.from(r.body) : r.body instanceof Uint8Array ? r.body : undefined;
    if (fixed) headers["Content-Length"] = String(bodyBytes?.length ?? 0);
    const opts: http.RequestOptions = { method: r.method, path: r.path, headers, agent: this.agent };
    if (e.kind === "unix") {
      opts.socketPath = e.socketPath;
      opts.host = "sandbox";
    } else {
      opts.protocol = e.url.protocol;
      opts.hostname = e.url.hostname.replace(/^\[|\]$/g, "");
      opts.port = e.url.port || (e.secure ? 443 : 80);
      opts.path = e.url.pathname.replace(/\/$/, "") + r.path;
    }
    return new Promise((resolveP, rejectP) => {
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        rejectP(err);
      };
      const mod = e.kind === "tcp" && e.secure ? https : http;
      const req = mod.request(opts);
      onRequest?.(req);
      let timer: NodeJS.Timeout | undefined;
      if (!r.noTimeout && this.o.requestTimeoutMs > 0) {
        timer = setTimeout(() => {
          fail(new SandboxError(`${r.method} ${r.path}: no answer within ${this.o.requestTimeoutMs} ms`));
          req.destroy();
        }, this.o.requestTimeoutMs);
      }
      const onAbort = () => {
        fail(r.signal?.reason ?? new SandboxError("aborted"));
        req.destroy();
      };
      r.signal?.addEventListener("abort", onAbort, { once: true });
      const done = () => {
        if (timer) clearTimeout(timer);
        r.signal?.removeEventListener("abort", onAbort);
      };
      req.on("error", (err) => {
        done();
        fail(new ConnectionError(e.display, err));
      });
      req.on("response", (res) => {
        done();
        if ((res.statusCode ?? 0) < 400) {
          if (settled) {
            res.resume();
            return;
          }
          settled = true;
          resolveP(res);
          return;
        }
        readAll(res).then(
          (b) => fail(errorOf(res.statusCode ?? 0, res.statusMessage ?? "", b)),
          (err) => fail(new ConnectionError(e.display, err)),
        );
      });
      if (r.signal?.aborted) return onAbort();
      if (fixed) {
        req.end(bodyBytes);
        return;
      }
      // A streamed body: written as it comes; a write error (the service
      // ended the call and closed the connection) only ends the pump.
      void (async () => {
        try {
          if (r.prefix) req.write(r.prefix);
          for await (const chunk of r.body as AsyncIterable<Uint8Array | string>) {
            if (req.destroyed || req.writableEnded) break;
            if (!req.write(typeof chunk === "string" ? Buffer.from(chunk) : chunk)) {
              await new Promise<void>((ok) => {
                const go = () => {
                  req.off("drain", go);
                  req.off("close", go);
                  ok();
                };
                req.on("drain", go);
                req.on("close", go);
              });
            }
          }
          if (!req.destroyed && !req.writableEnded) req.end();
        } catch (err) {
          req.destroy(err as Error);
        }
      })();
    });
  }

  /** Sends a request and reads its JSON answer (undefined for an empty body, a 204). */
  async json<T>(r: Req): Promise<T> {
    const res = await this.send(r);
    const b = await readAll(res);
    if (b.length === 0) return undefined as T;
    try {
      return JSON.parse(b.toString("utf8")) as T;
    } catch (err) {
      throw new InternalError(res.statusCode ?? 0, { category: "internal", message: `the service answered ${res.statusCode} with a body that is not JSON: ${(err as Error).message}` });
    }
  }
}

/**
 * Reads a response to its end; with `max`, refuses (and drops the
 * connection) as soon as it says or proves to be longer.
 */
export function readAll(res: http.IncomingMessage, max?: number): Promise<Buffer> {
  return new Promise((ok, bad) => {
    const parts: Buffer[] = [];
    let n = 0;
    const over = () => {
      bad(new SandboxError(`the answer is over the bound of ${max} bytes`));
      res.destroy();
    };
    if (max !== undefined && Number(res.headers["content-length"] ?? 0) > max) return over();
    res.on("data", (c: Buffer) => {
      n += c.length;
      if (max !== undefined && n > max) return over();
      parts.push(c);
    });
    res.on("end", () => ok(Buffer.concat(parts)));
    res.on("error", bad);
    res.on("close", () => {
      if (!res.complete) bad(new SandboxError("the connection broke while reading the answer"));
    });
  });
}

/** The typed error of an error answer. */
export function errorOf(status: number, statusText: string, body: Buffer): Error {
  let parsed: Partial<APIErrorBody> | undefined;
  try {
    parsed = JSON.parse(body.toString("utf8")) as Partial<APIErrorBody>;
  } catch {
    parsed = undefined;
  }
  if (!parsed || typeof parsed.message !== "string" || parsed.message === "") {
    return apiError(status, { category: "internal", message: `the service answered ${status} ${statusText}: ${body.toString("utf8").trim()}` });
  }
  return apiError(status, { ...parsed, category: typeof parsed.category === "string" ? parsed.category : "internal", message: parsed.message } as APIErrorBody);
}
