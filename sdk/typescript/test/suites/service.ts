// The rest of the surface: health, the OpenAPI document, metrics, pools,
// fleets with progress, records, and the JCP endpoints (thin wrappers).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { contentAddress, DeniedError, InvalidError, NotFoundError, type SandboxClient } from "@opensandbox/sdk";
import { REPO, service } from "../harness.js";

describe("service, pools, fleets, records, JCP", () => {
  let client: SandboxClient;
  before(async () => {
    client = (await service()).client;
  });

  it("answers health, its OpenAPI document and metrics", async () => {
    const h = await client.health();
    assert.equal(h.ok, true);
    assert.equal(typeof h.sandboxes, "number");
    const doc = await client.openapi();
    const onDisk = JSON.parse(readFileSync(join(REPO, "docs/openapi.json"), "utf8"));
    assert.deepEqual(Object.keys(doc.paths as object).sort(), Object.keys(onDisk.paths).sort());
    const m = await client.metrics();
    assert.match(m, /^sandbox_http_requests_total\{code="200"\} \d+$/m);
  });

  it("lists pools (none configured) and refuses a claim of an unknown pool", async () => {
    assert.deepEqual(await client.pools(), []);
    await assert.rejects(client.claim("no-such-pool"), (e: unknown) => e instanceof NotFoundError && /no-such-pool/.test(e.message));
  });

  it("runs a fleet, telling its progress", async () => {
    const progress: [number, number][] = [];
    const f = await client.fleet({ args: ["sh", "-c", 'test "$0" != b'], inputs: ["a", "b", "c", "d"], workers: 2 }, { onProgress: (d, t) => progress.push([d, t]) });
    assert.match(f.id, /^fl-/);
    assert.equal(f.items, 4);
    assert.equal(f.failed, 1);
    assert.ok(f.checkpoint.length > 0);
    assert.ok(progress.length >= 1);
    assert.deepEqual(progress.at(-1), [4, 4]);
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i]![0] >= progress[i - 1]![0]);
    await assert.rejects(client.fleet({ inputs: ["x"] }), (e: unknown) => e instanceof InvalidError && /args/.test(e.message));
  });

  it("lists records of the caller's sandboxes", async () => {
    const sb = await client.create();
    await sb.exec(["true"]);
    await sb.exec(["true"]);
    const rec = (await client.records()).find((r) => r.id === sb.id);
    assert.equal(rec?.phase, "active");
    assert.equal(rec?.executed, 2);
    assert.match(rec!.head, /^b3:/);
    await sb.remove();
    assert.equal((await client.records()).find((r) => r.id === sb.id)?.phase, "closed");
  });

  describe("JCP", () => {
    const vectors = JSON.parse(readFileSync(join(REPO, "conformance/v1/positive/jcp.json"), "utf8")) as {
      cases: { name: string; chain?: string[] }[];
    };
    const chain = vectors.cases.find((c) => c.name === "chain-depth-1")!.chain!.map((e) => new Uint8Array(Buffer.from(e, "base64url")));

    it("gives the host key and the roots", async () => {
      const info = await client.jcpInfo();
      assert.match(info.key, /^ed25519:[0-9a-f]{64}$/);
      assert.ok(Array.isArray(info.roots));
      assert.equal(await client.hostKey(), info.key);
    });

    it("verifies a chain sent as bytes: refused (not a root this host trusts), not an error", async () => {
      const v = await client.jcpVerifyChain(chain);
      assert.equal(v.ok, false);
      assert.ok(v.refusal && v.refusal.code.length > 0 && v.refusal.message.length > 0);
    });

    it("gives a chain's budgets, naming each grant by the address of its envelope", async () => {
      const b = await client.jcpBudgets(chain);
      assert.equal(b.length, 1);
      assert.equal(b[0]!.grant, contentAddress(chain[0]!));
      assert.equal(b[0]!.admitted, false);
      assert.ok(b[0]!.classes.some((c) => c.class === "Cpu" && c.ceiling_uj > 0));
    });

    it("refuses to admit it with DeniedError carrying the refusal code", async () => {
      await assert.rejects(client.jcpAdmit(chain), (e: unknown) => e instanceof DeniedError && typeof e.code === "string" && e.code.length > 0);
    });

    it("refuses an element that is not standard base64, naming it", async () => {
      await assert.rejects(client.jcpVerifyChain(["!!not base64"]), (e: unknown) => e instanceof InvalidError && /chain\[0\]/.test(e.message));
    });

    it("reads and replays the ledger, and posts an event (operator)", async () => {
      const l = await client.jcpLedger();
      assert.equal(typeof l.entries, "number");
      assert.match(l.head, /^b3:/);
      const r = await client.jcpVerifyLedger();
      assert.equal(r.ok, true);
      assert.equal(r.head, l.head);
      const ev = await client.jcpEvent("sdk-test-nothing-listens");
      assert.deepEqual(ev, { minted: [], refused: [] });
    });
  });
});
