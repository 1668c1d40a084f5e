// The test harness: builds the three binaries once (or takes them from
// $SANDBOX_SDK_BIN, where test.sh built them), starts one real `sandbox
// serve` with a temporary SANDBOX_HOME (on its unix socket, and on TCP
// with TLS and two tokens when openssl is there), waits for it, and at the
// end removes what the tests left, stops it, collects its leftovers
// (`sandbox gc`) and deletes every temporary file.

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { subscribe } from "node:diagnostics_channel";
import type { ClientRequest } from "node:http";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { SandboxClient } from "@opensandbox/sdk";

const run = promisify(execFile);

/** The repository's root (sdk/typescript/build/test → four up). */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

export interface Service {
  /** Where the binaries are. */
  bin: string;
  /** The service's state directory. */
  home: string;
  /** Its unix socket. */
  socket: string;
  /** A client on the socket (the operator, `local`). */
  client: SandboxClient;
  /** https://127.0.0.1:PORT, when TLS could be set up. */
  url?: string;
  /** The self-signed certificate (PEM) of the TCP listener. */
  ca?: string;
  /** Two tokens the service was given. */
  tokens: [string, string];
  /** Why there is no TCP listener, when there is none. */
  noTLS?: string;
  /** Runs the CLI against this service's state directory. */
  cli(...args: string[]): Promise<string>;
  /** What the service logged so far. */
  log(): string;
}

/** A request this process sent (any HTTP client in it: the SDK's, to the real service or to a test's own server). */
export interface Sent {
  method: string;
  /** The path and query, as sent. */
  path: string;
  /** The Host header: `sandbox` on the unix socket, HOST:PORT over TCP. */
  host: string;
}

/** Every HTTP request this process sent, recorded from the start (node:diagnostics_channel), for the API parity check. */
export const sent: Sent[] = [];
subscribe("http.client.request.start", (msg) => {
  const { request } = msg as { request: ClientRequest };
  sent.push({ method: request.method, path: request.path, host: String(request.getHeader("host") ?? "") });
});

let started: Promise<Service> | undefined;
let proc: ChildProcess | undefined;
const temps: string[] = [];
const clients: SandboxClient[] = [];

function freePort(): Promise<number> {
  return new Promise((ok, bad) => {
    const s = createServer();
    s.once("error", bad);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? ok(a.port) : bad(new Error("no port"))));
    });
  });
}

async function buildBinaries(): Promise<string> {
  if (process.env.SANDBOX_SDK_BIN) return process.env.SANDBOX_SDK_BIN;
  const d = mkdtempSync(join(tmpdir(), "sdk-ts-bin-"));
  temps.push(d);
  const env = { ...process.env };
  await run("go", ["build", "-o", join(d, "sandbox"), "./cmd/sandbox"], { cwd: REPO, env: { ...env, CGO_ENABLED: "0" } });
  await run("go", ["build", "-o", join(d, "sandbox-engine"), "./cmd/sandbox-engine"], { cwd: REPO, env });
  await run("go", ["build", "-trimpath", "-o", join(d, "sandbox-s1"), "./cmd/sandbox-s1"], { cwd: REPO, env: { ...env, CGO_ENABLED: "0" } });
  return d;
}

async function haveOpenSSL(): Promise<string | undefined> {
  try {
    await run("openssl", ["version"]);
    return undefined;
  } catch (e) {
    return `openssl is not on PATH (${(e as Error).message})`;
  }
}

async function waitFor(what: string, ok: () => Promise<boolean> | boolean, ms: number, log: () => string): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await ok()) return;
    if (proc?.exitCode !== null && proc?.exitCode !== undefined) throw new Error(`sandbox serve exited (${proc.exitCode}) before ${what}:\n${log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`sandbox serve: no ${what} within ${ms} ms:\n${log()}`);
}

async function start(): Promise<Service> {
  const bin = await buildBinaries();
  const work = mkdtempSync(join(tmpdir(), "sdk-ts-svc-"));
  temps.push(work);
  const home = join(work, "home");
  const socket = join(home, "serve.sock");
  const tokens: [string, string] = [`tok-${Math.random().toString(36).slice(2)}-aaaaaaaaaaaaaaaa`, `tok-${Math.random().toString(36).slice(2)}-bbbbbbbbbbbbbbbb`];
  const args = ["serve", "--grace", "2s"];
  let url: string | undefined;
  let ca: string | undefined;
  const noTLS = await haveOpenSSL();
  if (!noTLS) {
    const cert = join(work, "cert.pem");
    const key = join(work, "key.pem");
    await run("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
      "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
      "-keyout", key, "-out", cert,
    ]);
    writeFileSync(join(work, "tokens"), tokens.join("\n") + "\n", { mode: 0o600 });
    const port = await freePort();
    args.push("--listen", `127.0.0.1:${port}`, "--tls-cert", cert, "--tls-key", key, "--token-file", join(work, "tokens"));
    url = `https://127.0.0.1:${port}`;
    ca = readFileSync(cert, "utf8");
  }
  let log = "";
  proc = spawn(join(bin, "sandbox"), args, { env: { ...process.env, SANDBOX_HOME: home }, stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout!.on("data", (b: Buffer) => (log += b.toString()));
  proc.stderr!.on("data", (b: Buffer) => (log += b.toString()));
  const client = new SandboxClient({ address: socket });
  clients.push(client);
  await waitFor("socket", async () => existsSync(socket) && (await client.health().then(() => true, () => false)), 30_000, () => log);
  if (url) {
    const probe = new SandboxClient({ address: url, token: tokens[0], ca: ca! });
    clients.push(probe);
    await waitFor("TCP listener", () => probe.health().then(() => true, () => false), 15_000, () => log);
  }
  process.on("exit", () => {
    // A last resort if the after hook never ran: no service outlives the tests.
    if (proc && proc.exitCode === null) proc.kill("SIGKILL");
  });
  const svc: Service = {
    bin,
    home,
    socket,
    client,
    tokens,
    log: () => log,
    cli: async (...a: string[]) => (await run(join(bin, "sandbox"), a, { env: { ...process.env, SANDBOX_HOME: home } })).stdout,
  };
  if (url) {
    svc.url = url;
    svc.ca = ca!;
  }
  if (noTLS) svc.noTLS = noTLS;
  return svc;
}

/** Skips test `t` when the service has no TLS listener (no openssl), saying why; true when skipped. */
export function skipped(t: { skip(message?: string): void }, svc: Service): boolean {
  if (!svc.noTLS) return false;
  t.skip(`no TLS listener: ${svc.noTLS}`);
  return true;
}

/** The one service of this test run, started on first use. */
export function service(): Promise<Service> {
  started ??= start();
  return started;
}

/** A client the harness closes at the end. */
export function track<T extends SandboxClient>(c: T): T {
  clients.push(c);
  return c;
}

/** Removes every sandbox the tests left (the operator's and each token's), stops the service and deletes the temporary files. */
export async function stopService(): Promise<void> {
  if (started) {
    const svc = await started.catch(() => undefined);
    if (svc) {
      const who = [svc.client];
      if (svc.url) for (const t of svc.tokens) who.push(track(new SandboxClient({ address: svc.url, token: t, ca: svc.ca! })));
      for (const c of who) {
        for (const sb of await c.list().catch(() => [])) await c.closeRecord(sb.id).catch(() => c.remove(sb.id).catch(() => undefined));
      }
    }
    for (const c of clients) c.close();
    if (proc && proc.exitCode === null) {
      const exited = new Promise((ok) => proc!.once("exit", ok));
      proc.kill("SIGTERM");
      const t = setTimeout(() => proc!.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(t);
    }
    if (svc) await run(join(svc.bin, "sandbox"), ["gc"], { env: { ...process.env, SANDBOX_HOME: svc.home } }).catch(() => undefined);
  }
  for (const d of temps.splice(0)) rmSync(d, { recursive: true, force: true });
}
