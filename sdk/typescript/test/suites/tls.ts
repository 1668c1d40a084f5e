// TCP with TLS and bearer tokens: a token's own sandboxes, another
// token's unseen, a wrong token refused (UnauthorizedError), a
// certificate not trusted refused (ConnectionError).

import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { ConnectionError, DeniedError, NotFoundError, SandboxClient, UnauthorizedError } from "@opensandbox/sdk";
import { service, skipped, track, type Service } from "../harness.js";

describe("TCP with TLS and tokens", () => {
  // Registered at once (a suite that awaited here would take the suites
  // imported after it as its own); each test skips itself without TLS.
  let svc: Service;
  let alice: SandboxClient;
  let bob: SandboxClient;
  before(async () => {
    svc = await service();
    if (svc.noTLS) return;
    alice = track(new SandboxClient({ address: svc.url!, token: svc.tokens[0], ca: svc.ca! }));
    bob = track(new SandboxClient({ address: svc.url!, token: svc.tokens[1], ca: svc.ca! }));
  });

  it("creates, execs in and removes a sandbox with a token, over https", async (t) => {
    if (skipped(t, svc)) return;
    assert.equal(alice.address, svc.url);
    assert.equal((await alice.health()).ok, true);
    const sb = await alice.create();
    const r = await sb.exec({ args: ["sh", "-c", "cat; echo over tls"], stdin: "in " });
    assert.equal(r.stdout?.toString(), "in over tls\n");
    await sb.upload(`${sb.workspace}/t.txt`, "via tcp");
    assert.equal((await sb.download(`${sb.workspace}/t.txt`)).toString(), "via tcp");
    // Another token does not see it: 404, as if it did not exist.
    await assert.rejects(bob.get(sb.id), NotFoundError);
    await assert.rejects(bob.exec(sb.id, { args: ["true"] }), NotFoundError);
    assert.ok(!(await bob.list()).some((s) => s.id === sb.id));
    assert.ok((await alice.list()).some((s) => s.id === sb.id));
    await sb.remove();
  });

  it("holds a token to the default policy: no host path", async (t) => {
    if (skipped(t, svc)) return;
    await assert.rejects(alice.run({ args: ["ls", "/etc"], grants: ["fs:/etc:ro"] }), (e: unknown) => e instanceof DeniedError && e.status === 403);
  });

  it("finds the service and token through SANDBOX_HOST and SANDBOX_TOKEN", async (t) => {
    if (skipped(t, svc)) return;
    const c = track(new SandboxClient({ ca: svc.ca!, env: { SANDBOX_HOST: svc.url!, SANDBOX_TOKEN: svc.tokens[0] } }));
    assert.equal((await c.health()).ok, true);
  });

  it("refuses a wrong token and no token with UnauthorizedError (401)", async (t) => {
    if (skipped(t, svc)) return;
    for (const token of ["wrong-token-0123456789abcdef", undefined]) {
      const c = track(new SandboxClient({ address: svc.url!, ca: svc.ca!, env: {}, ...(token ? { token } : {}) }));
      await assert.rejects(c.list(), (e: unknown) => {
        assert.ok(e instanceof UnauthorizedError, String(e));
        assert.ok(e instanceof DeniedError);
        assert.equal(e.status, 401);
        assert.equal(e.category, "denied");
        assert.match(e.message, /token/);
        return true;
      });
      await assert.rejects(c.exec("sb-x", { args: ["true"] }), UnauthorizedError);
    }
  });

  it("refuses a certificate it was not told to trust", async (t) => {
    if (skipped(t, svc)) return;
    const c = track(new SandboxClient({ address: svc.url!, token: svc.tokens[0] }));
    await assert.rejects(c.health(), (e: unknown) => e instanceof ConnectionError && /certificate/i.test(e.message));
  });
});
