// Finding the service: options, else $SANDBOX_HOST / $SANDBOX_TOKEN, else
// $SANDBOX_HOME/serve.sock, else the default state directory.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConnectionError, resolveAddress, SandboxClient, SandboxError } from "@opensandbox/sdk";
import { service, track } from "../harness.js";

describe("address resolution", () => {
  it("prefers the options, then SANDBOX_HOST and SANDBOX_TOKEN, then the state directory", () => {
    const env = { SANDBOX_HOST: "https://h.example:8443", SANDBOX_TOKEN: "t".repeat(20), SANDBOX_HOME: "/srv/sb", HOME: "/home/u" };
    const a = resolveAddress({ address: "/run/x.sock", env });
    assert.deepEqual([a.endpoint.display, a.token], ["unix:/run/x.sock", undefined]);
    const b = resolveAddress({ env });
    assert.deepEqual([b.endpoint.display, b.token], ["https://h.example:8443", "t".repeat(20)]);
    const c = resolveAddress({ env: { ...env, SANDBOX_HOST: "unix:/tmp/s.sock" } });
    assert.deepEqual([c.endpoint.display, c.token], ["unix:/tmp/s.sock", undefined]);
    assert.equal(resolveAddress({ env: { SANDBOX_HOME: "/srv/sb", HOME: "/home/u" } }).endpoint.display, "unix:/srv/sb/serve.sock");
    assert.equal(resolveAddress({ env: { XDG_STATE_HOME: "/x/state", HOME: "/home/u" } }).endpoint.display, "unix:/x/state/sandbox/serve.sock");
    assert.equal(resolveAddress({ env: { XDG_STATE_HOME: "relative", HOME: "/home/u" } }).endpoint.display, "unix:/home/u/.local/state/sandbox/serve.sock");
    assert.equal(resolveAddress({ env: { HOME: "/home/u" } }).endpoint.display, "unix:/home/u/.local/state/sandbox/serve.sock");
    assert.throws(() => resolveAddress({ address: "ftp://x" }), SandboxError);
  });

  it("reaches the service through SANDBOX_HOME alone", async () => {
    const svc = await service();
    const c = track(new SandboxClient({ env: { SANDBOX_HOME: svc.home } }));
    assert.equal(c.address, "unix:" + svc.socket);
    assert.equal((await c.health()).ok, true);
  });

  it("says so, as a ConnectionError, when nothing listens", async () => {
    const c = track(new SandboxClient({ address: "/nonexistent/dir/serve.sock" }));
    await assert.rejects(c.health(), (e: unknown) => e instanceof ConnectionError && /nonexistent/.test(e.message));
  });
});
