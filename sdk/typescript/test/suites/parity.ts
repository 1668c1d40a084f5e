// One API, three clients: the TypeScript client against docs/openapi.json.
//
// - OPERATIONS (src/operations.ts) names, for each public method, the
//   operations it sends; every operation of the OpenAPI is in it, and
//   nothing in it is outside the OpenAPI.
// - Every public method of SandboxClient, Sandbox and ExecStream (read
//   from the declarations tsc emitted) is in OPERATIONS or LOCAL_METHODS.
// - Each method, called against a server of the test's own that records
//   and refuses everything, sends only the operations OPERATIONS gives it
//   (method, path template, and only query parameters the OpenAPI
//   declares); together they send every operation.
// - Every path the SDK's sources spell begins a path of the OpenAPI.
// - Every request the integration tests sent to the real service (all of
//   them, recorded through node:diagnostics_channel) is an operation of
//   the OpenAPI, with declared query parameters only. This suite runs
//   last (test/all.test.ts).
// - The error categories and their statuses are docs/api.md's table and
//   the OpenAPI's enum.

import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  apiError,
  CATEGORY_STATUS,
  CanceledError,
  DeniedError,
  IntegrityError,
  InternalError,
  InvalidError,
  LimitError,
  LOCAL_METHODS,
  NotFoundError,
  OPERATIONS,
  SandboxClient,
  UnauthorizedError,
  UnavailableError,
  UntrustedError,
  type Sandbox,
} from "@opensandbox/sdk";
import { REPO, sent, service, track, type Sent } from "../harness.js";

const SDK = join(REPO, "sdk", "typescript");

interface Op {
  method: string;
  path: string;
  re: RegExp;
  query: Set<string>;
}

/** The OpenAPI document's operations: `METHOD /path`, each with a pattern its concrete paths match and its query parameters. */
function operations(): Map<string, Op> {
  const doc = JSON.parse(readFileSync(join(REPO, "docs/openapi.json"), "utf8")) as {
    paths: Record<string, Record<string, { parameters?: { name: string; in: string }[] }>>;
  };
  const ops = new Map<string, Op>();
  for (const [path, methods] of Object.entries(doc.paths)) {
    const re = new RegExp("^" + path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[A-Za-z_]+\}/g, "[^/]+") + "$");
    for (const [m, op] of Object.entries(methods)) {
      if (!["get", "post", "put", "delete", "patch"].includes(m)) continue;
      const query = new Set((op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
      ops.set(`${m.toUpperCase()} ${path}`, { method: m.toUpperCase(), path, re, query });
    }
  }
  return ops;
}

/** The operation a request is (method, path template), or why it is none. */
function match(ops: Map<string, Op>, s: Pick<Sent, "method" | "path">): { op?: string; why?: string } {
  const u = new URL(s.path, "http://x");
  const found = [...ops.entries()].filter(([, o]) => o.method === s.method && o.re.test(u.pathname));
  if (found.length !== 1) return { why: `${s.method} ${u.pathname} is ${found.length ? "ambiguous" : "no operation of the OpenAPI"}` };
  const [name, o] = found[0]!;
  const extra = [...u.searchParams.keys()].filter((k) => !o.query.has(k));
  if (extra.length) return { op: name, why: `${name} sent query parameter(s) ${extra.join(", ")}, which the OpenAPI does not declare` };
  return { op: name };
}

/** The public methods tsc declares for a class in dist/*.d.ts (private members are declared without a signature). */
function publicMethods(file: string, cls: string): string[] {
  const d = readFileSync(join(SDK, "dist", file), "utf8");
  const start = d.indexOf(`export declare class ${cls} `);
  assert.ok(start >= 0, `${cls} in dist/${file}`);
  const body = d.slice(start, d.indexOf("\n}\n", start));
  const out: string[] = [];
  for (const m of body.matchAll(/^ {4}(?!private |get |set |readonly |constructor)(?:static )?([A-Za-z_$][\w$]*)(?:<[^(]*>)?\(/gm)) out.push(`${cls}.${m[1]}`);
  return [...new Set(out)];
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

describe("API parity with docs/openapi.json", () => {
  const ops = operations();
  const declared = OPERATIONS as Record<string, readonly string[]>;

  it("has every operation of the OpenAPI in OPERATIONS, and nothing else", () => {
    assert.ok(ops.size >= 30, `${ops.size} operations`);
    for (const must of ["GET /metrics", "GET /v1/openapi.json", "GET /v1/key", "GET /v1/runs/{id}/bundle"]) assert.ok(ops.has(must), must);
    const inTable = new Set(Object.values(declared).flat());
    const missing = [...ops.keys()].filter((o) => !inTable.has(o)).sort();
    assert.deepEqual(missing, [], `operations of the OpenAPI no method of the TypeScript client sends: ${missing.join("; ")}`);
    const outside = [...inTable].filter((o) => !ops.has(o)).sort();
    assert.deepEqual(outside, [], `operations OPERATIONS names that the OpenAPI does not describe: ${outside.join("; ")}`);
  });

  it("has every public method of the client classes in OPERATIONS or LOCAL_METHODS", () => {
    const methods = [...publicMethods("client.d.ts", "SandboxClient"), ...publicMethods("client.d.ts", "Sandbox"), ...publicMethods("stream.d.ts", "ExecStream")];
    assert.ok(methods.includes("SandboxClient.verifyRun") && methods.includes("Sandbox.resume"), methods.join(" "));
    const known = new Set([...Object.keys(declared), ...LOCAL_METHODS]);
    const unlisted = methods.filter((m) => !known.has(m));
    assert.deepEqual(unlisted, [], `public methods in neither OPERATIONS nor LOCAL_METHODS: ${unlisted.join(", ")}`);
    const gone = [...known].filter((m) => !methods.includes(m));
    assert.deepEqual(gone, [], `OPERATIONS or LOCAL_METHODS name methods the classes do not have: ${gone.join(", ")}`);
  });

  it("spells in its sources only paths that begin a path of the OpenAPI", () => {
    const paths = [...ops.values()].map((o) => o.path);
    const lit = /["'`](\/v1\/[^"'`?$]*|\/metrics)/g;
    let n = 0;
    for (const f of sources(join(SDK, "src"))) {
      for (const m of readFileSync(f, "utf8").matchAll(lit)) {
        n++;
        assert.ok(paths.some((p) => p.startsWith(m[1]!)), `${f} spells ${JSON.stringify(m[1])}, which begins no path of the OpenAPI`);
      }
    }
    assert.ok(n >= 20, `${n} path literals found`);
  });

  describe("each method sends what OPERATIONS says (recorded)", () => {
    let server: Server;
    let c: SandboxClient;
    let got: Sent[] = [];
    let hold = false; // execs left unanswered (in flight) while set
    const held: (() => void)[] = [];
    before(async () => {
      server = createServer((req, rsp) => {
        got.push({ method: req.method!, path: req.url!, host: "" });
        req.resume();
        const answer = () => rsp.writeHead(404, { "Content-Type": "application/json" }).end(JSON.stringify({ category: "not-found", message: "recorded" }));
        req.on("end", () => (hold && req.url!.endsWith("/exec") ? held.push(answer) : answer()));
      });
      await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
      const a = server.address();
      c = track(new SandboxClient({ address: `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`, env: {} }));
    });
    after(() => new Promise<void>((ok) => server.close(() => ok())));

    const run = "b3:" + "ab".repeat(32);
    const chain = [new Uint8Array([1])];
    const sb = (): Sandbox => c.sandbox("sb-0");
    // One call of each method; `reset` forgets what was sent so far (for a method that needs another call first).
    const calls: Record<string, (reset: () => void) => Promise<unknown>> = {
      "SandboxClient.health": () => c.health(),
      "SandboxClient.openapi": () => c.openapi(),
      "SandboxClient.metrics": () => c.metrics(),
      "SandboxClient.hostKey": () => c.hostKey(),
      "SandboxClient.create": () => c.create({}),
      "SandboxClient.claim": () => c.claim("pool"),
      "SandboxClient.pools": () => c.pools(),
      "SandboxClient.list": () => c.list(),
      "SandboxClient.get": () => c.get("sb-0"),
      "SandboxClient.remove": () => c.remove("sb-0"),
      "SandboxClient.suspend": () => c.suspend("sb-0"),
      "SandboxClient.fork": () => c.fork("sb-0", { count: 2 }),
      "SandboxClient.watch": () => c.watch("sb-0", "/w", () => false, { recursive: true }),
      "SandboxClient.exposePort": () => c.exposePort("sb-0", { port: 8000, ttl_seconds: 60 }),
      "SandboxClient.listPorts": () => c.listPorts("sb-0"),
      "SandboxClient.revokePort": () => c.revokePort("sb-0", 8000),
      "SandboxClient.resume": () => c.resume("sb-0", { here: true }),
      "SandboxClient.closeRecord": () => c.closeRecord("sb-0"),
      "SandboxClient.seed": () => c.seed("sb-0", { source: "s", ref: "r" } as never),
      "SandboxClient.preservation": () => c.preservation("sb-0", {} as never),
      "SandboxClient.records": () => c.records(),
      "SandboxClient.exec": () => c.exec("sb-0", { args: ["x"] }),
      "SandboxClient.execStream": () => c.execStream("sb-0", { args: ["x"] }).result,
      "SandboxClient.run": () => c.run({ args: ["x"] }),
      "SandboxClient.runStream": () => c.runStream({ args: ["x"] }).result,
      "SandboxClient.interrupt": () => c.interrupt("key-0123456789abcdef"),
      "SandboxClient.getRun": () => c.getRun(run),
      "SandboxClient.runBundle": () => c.runBundle(run),
      "SandboxClient.verifyRun": () => c.verifyRun(run, { trustServiceKey: true }),
      "SandboxClient.upload": () => c.upload("sb-0", "/w/f", "x"),
      "SandboxClient.download": () => c.download("sb-0", "/w/f"),
      "SandboxClient.downloadStream": () => c.downloadStream("sb-0", "/w/f"),
      "SandboxClient.listFiles": () => c.listFiles("sb-0", "/w"),
      "SandboxClient.fleet": () => c.fleet({ args: ["x"], inputs: ["a"] }),
      "SandboxClient.jcpInfo": () => c.jcpInfo(),
      "SandboxClient.jcpLedger": () => c.jcpLedger(),
      "SandboxClient.jcpVerifyLedger": () => c.jcpVerifyLedger(),
      "SandboxClient.jcpVerifyChain": () => c.jcpVerifyChain(chain),
      "SandboxClient.jcpAdmit": () => c.jcpAdmit(chain),
      "SandboxClient.jcpBudgets": () => c.jcpBudgets(chain),
      "SandboxClient.jcpRevoke": () => c.jcpRevoke(chain, chain[0]!),
      "SandboxClient.jcpAmend": () => c.jcpAmend(chain, chain[0]!),
      "SandboxClient.jcpPolicy": () => c.jcpPolicy(chain),
      "SandboxClient.jcpEvent": () => c.jcpEvent("e"),
      "SandboxClient.jcpCheckpoint": () => c.jcpCheckpoint(chain, chain[0]!),
      "Sandbox.refresh": () => sb().refresh(),
      "Sandbox.exec": () => sb().exec(["x"]),
      "Sandbox.execStream": () => sb().execStream(["x"]).result,
      "Sandbox.upload": () => sb().upload("/w/f", "x"),
      "Sandbox.download": () => sb().download("/w/f"),
      "Sandbox.downloadStream": () => sb().downloadStream("/w/f"),
      "Sandbox.listFiles": () => sb().listFiles("/w"),
      "Sandbox.suspend": () => sb().suspend(),
      "Sandbox.fork": () => sb().fork(2),
      "Sandbox.exposePort": () => sb().exposePort(8000),
      "Sandbox.listPorts": () => sb().listPorts(),
      "Sandbox.revokePort": () => sb().revokePort(8000),
      "Sandbox.resume": () => sb().resume({ here: true }),
      "Sandbox.close": () => sb().close(),
      "Sandbox.remove": () => sb().remove(),
      "Sandbox.seed": () => sb().seed({ source: "s", ref: "r" } as never),
      "Sandbox.preservation": () => sb().preservation({} as never),
      "ExecStream.interrupt": async (reset) => {
        hold = true;
        const s = c.execStream("sb-0", { args: ["x"] });
        while (got.length === 0) await new Promise((ok) => setTimeout(ok, 5));
        reset(); // the exec is in flight: what follows is the interrupt's
        await s.interrupt().catch(() => undefined);
        hold = false;
        for (const answer of held.splice(0)) answer();
        await s.result.catch(() => undefined);
      },
    };

    it("has a call here for every method of OPERATIONS", () => {
      assert.deepEqual(Object.keys(calls).sort(), Object.keys(declared).sort());
    });

    it("sends, for each method, only its operations; together, every operation", async () => {
      const covered = new Set<string>();
      const problems: string[] = [];
      for (const [name, call] of Object.entries(calls)) {
        got = [];
        await call(() => (got = [])).catch(() => undefined);
        if (got.length === 0) problems.push(`${name} sent nothing`);
        for (const s of got) {
          const { op, why } = match(ops, s);
          if (why) problems.push(`${name}: ${why}`);
          if (op && !declared[name]!.includes(op)) problems.push(`${name} sent ${op}, which OPERATIONS does not give it`);
          if (op) covered.add(op);
        }
      }
      assert.deepEqual(problems, []);
      assert.deepEqual([...ops.keys()].filter((o) => !covered.has(o)).sort(), []);
    });

    it("sends resume's `here` only when asked, as here=true", async () => {
      got = [];
      await c.resume("sb-0").catch(() => undefined);
      await c.resume("sb-0", { here: false }).catch(() => undefined);
      await c.resume("sb-0", { here: true }).catch(() => undefined);
      assert.deepEqual(got.map((s) => s.path), ["/v1/sandboxes/sb-0/resume", "/v1/sandboxes/sb-0/resume", "/v1/sandboxes/sb-0/resume?here=true"]);
    });
  });

  it("maps every error category to docs/api.md's status and class", () => {
    const doc = JSON.parse(readFileSync(join(REPO, "docs/openapi.json"), "utf8"));
    const enumd = (doc.components.schemas.Error.properties.category.enum as string[]).sort();
    assert.deepEqual(Object.keys(CATEGORY_STATUS).sort(), enumd);
    const md = readFileSync(join(REPO, "docs/api.md"), "utf8");
    const errors = md.slice(md.indexOf("## Errors"), md.indexOf("\n## ", md.indexOf("## Errors") + 3));
    const table = Object.fromEntries([...errors.matchAll(/^\| ([a-z-]+) \| (\d{3}) \|/gm)].map((m) => [m[1]!, Number(m[2])]));
    assert.deepEqual(table, { ...CATEGORY_STATUS });
    assert.match(errors, /401[^\n]*\n?[^\n]*category is\s+`denied`/);
    const classes = { invalid: InvalidError, denied: DeniedError, "not-found": NotFoundError, limit: LimitError, unavailable: UnavailableError, integrity: IntegrityError, untrusted: UntrustedError, canceled: CanceledError, internal: InternalError };
    for (const [cat, status] of Object.entries(CATEGORY_STATUS)) {
      const e = apiError(status, { category: cat, message: "m" });
      assert.ok(e instanceof classes[cat as keyof typeof classes], cat);
      assert.equal(e.status, status);
    }
    assert.ok(apiError(401, { category: "denied", message: "no token" }) instanceof UnauthorizedError);
    assert.ok(apiError(403, { category: "untrusted", message: "m" }) instanceof UntrustedError);
    assert.ok(!(apiError(403, { category: "untrusted", message: "m" }) instanceof DeniedError));
  });

  // Last: what the other suites sent to the real service.
  it("sent the real service only operations of the OpenAPI, with declared query parameters", async (t) => {
    const svc = await service();
    const hosts = new Set(["sandbox", ...(svc.url ? [new URL(svc.url).host] : [])]);
    const real = sent.filter((s) => hosts.has(s.host));
    assert.ok(real.length > 100, `${real.length} requests recorded`);
    const problems = new Set<string>();
    const covered = new Set<string>();
    for (const s of real) {
      const { op, why } = match(ops, s);
      if (why) problems.add(why);
      if (op) covered.add(op);
    }
    assert.deepEqual([...problems], []);
    const notExercised = [...ops.keys()].filter((o) => !covered.has(o)).sort();
    t.diagnostic(`${real.length} requests to the real service, ${covered.size} of ${ops.size} operations; not exercised against it: ${notExercised.join("; ") || "none"}`);
    for (const must of ["GET /v1/key", "GET /v1/runs/{id}/bundle", "GET /v1/sandboxes/{id}", "POST /v1/sandboxes/{id}/resume", "GET /metrics", "GET /v1/openapi.json"]) {
      assert.ok(covered.has(must), `the integration tests never sent ${must}`);
    }
  });
});
