// Port previews against the real service: a live S1 sandbox made with a
// listen port is exposed through the service's TCP listener (TLS, the
// harness's self-signed certificate) once something answers on the port;
// the URL reaches the port with no bearer token until it is revoked; a
// listing never says the token; nothing left to revoke is NotFoundError.
// Without openssl the service has no TCP listener, and exposing is refused
// as UnavailableError.

import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { connect } from "node:tls";
import { InvalidError, NotFoundError, SandboxClient, UnavailableError } from "@opensandbox/sdk";
import { service, skipped, track, type Service } from "../harness.js";

/** Starts a web server on the sandbox's port 8000 (in a session of its own, so that it outlives the exec) and waits until it answers. */
const SERVE_8000 =
  "cd /tmp && setsid /usr/bin/python3 -m http.server -b 127.0.0.1 8000 </dev/null >/dev/null 2>&1 & " +
  "for i in $(seq 100); do /usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1";

interface Fetched {
  status: number;
  headers: Map<string, string>;
  body: string;
}

/**
 * GET `url` over TLS trusting `ca` alone, as a browser given the URL would
 * (no bearer token). Spoken by hand on a TLS socket, not with node:http,
 * so that it is not among the API requests the harness records for the
 * parity suite (a preview is no operation of the API).
 */
function fetchPreview(url: string, ca: string): Promise<Fetched> {
  const u = new URL(url);
  assert.equal(u.protocol, "https:");
  return new Promise((ok, bad) => {
    const s = connect({ host: u.hostname, port: Number(u.port), ca, servername: u.hostname === "127.0.0.1" ? undefined : u.hostname });
    const chunks: Buffer[] = [];
    s.setTimeout(60_000, () => s.destroy(new Error(`no answer from ${url} within 60 s`)));
    // Written, not ended: a server that sees the client's side closed may take the request as abandoned.
    s.once("secureConnect", () => s.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n\r\n`));
    s.on("data", (b: Buffer) => chunks.push(b));
    s.once("error", bad);
    s.once("end", () => {
      const raw = Buffer.concat(chunks).toString("latin1");
      const split = raw.indexOf("\r\n\r\n");
      const [statusLine, ...lines] = raw.slice(0, split).split("\r\n");
      const m = /^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? "");
      if (!m) return bad(new Error(`not an HTTP answer: ${raw.slice(0, 200)}`));
      const headers = new Map<string, string>();
      for (const l of lines) {
        const i = l.indexOf(":");
        const k = l.slice(0, i).trim().toLowerCase();
        headers.set(k, headers.has(k) ? `${headers.get(k)}, ${l.slice(i + 1).trim()}` : l.slice(i + 1).trim());
      }
      ok({ status: Number(m[1]), headers, body: raw.slice(split + 4) });
    });
  });
}

describe("port previews", () => {
  // Registered at once; each test skips itself where the service's TCP listener is (or is not) there.
  let svc: Service;
  let alice: SandboxClient;
  let bob: SandboxClient;
  before(async () => {
    svc = await service();
    if (svc.noTLS) return;
    alice = track(new SandboxClient({ address: svc.url!, token: svc.tokens[0], ca: svc.ca! }));
    bob = track(new SandboxClient({ address: svc.url!, token: svc.tokens[1], ca: svc.ca! }));
  });

  it("are refused as unavailable by a service without a TCP listener", async (t) => {
    if (!svc.noTLS) return t.skip("the service has a TCP listener (openssl is installed): see the next test");
    const sb = await svc.client.create({ listen: [8000] });
    try {
      await assert.rejects(sb.exposePort(8000), (e: unknown) => e instanceof UnavailableError && e.status === 503 && /serve --listen/.test(e.message));
      assert.deepEqual(await sb.listPorts(), []);
      await assert.rejects(sb.revokePort(8000), NotFoundError);
    } finally {
      await sb.remove();
    }
  });

  it("expose a listening port at a URL that reaches it without a token, until revoked", async (t) => {
    if (skipped(t, svc)) return;
    const sb = await alice.create({ listen: [8000] });
    try {
      assert.equal(sb.info.tier, "S1");
      assert.deepEqual(sb.info.listen, [8000]);
      // Nothing answers yet: no URL is made.
      await assert.rejects(sb.exposePort(8000), (e: unknown) => e instanceof UnavailableError && e.status === 503 && /answers on port 8000/.test(e.message));
      assert.deepEqual(await sb.listPorts(), []);
      const r = await sb.exec(["sh", "-c", SERVE_8000]);
      assert.equal(r.exit_status, 0, `the web server in the sandbox did not start: ${JSON.stringify(r.outcome)}`);
      // A port it was not made with; a ttl past a day.
      await assert.rejects(sb.exposePort(9000), (e: unknown) => e instanceof InvalidError && /port 9000/.test(e.message));
      await assert.rejects(sb.exposePort(8000, { ttl_seconds: 86_401 }), (e: unknown) => e instanceof InvalidError && /ttl_seconds/.test(e.message));
      // Another token's caller may not expose, list or revoke it.
      await assert.rejects(bob.exposePort(sb.id, { port: 8000 }), NotFoundError);
      await assert.rejects(bob.listPorts(sb.id), NotFoundError);
      await assert.rejects(bob.revokePort(sb.id, 8000), NotFoundError);

      const pv = await sb.exposePort(8000, { ttl_seconds: 600 });
      assert.equal(pv.sandbox, sb.id);
      assert.equal(pv.port, 8000);
      assert.match(pv.token!, /^[A-Za-z0-9_-]{43}$/);
      assert.equal(pv.url, `${svc.url}/preview/${pv.token}/`);
      assert.match(pv.preview, /^b3:[0-9a-f]{64}$/);
      const left = Date.parse(pv.expires) - Date.now();
      assert.ok(left > 500_000 && left <= 600_000, `expires in ${left} ms`);

      // Through the URL, with no bearer token.
      const got = await fetchPreview(pv.url!, svc.ca!);
      assert.equal(got.status, 200, got.body.slice(0, 300));
      assert.match(got.body, /Directory listing/);
      assert.match(got.headers.get("content-security-policy") ?? "", /sandbox allow-scripts/);
      assert.equal(got.headers.get("referrer-policy"), "no-referrer");

      // Listed without its token or URL.
      const listed = await sb.listPorts();
      assert.deepEqual(listed, [{ sandbox: sb.id, port: 8000, preview: pv.preview, expires: pv.expires }]);
      assert.deepEqual(await alice.listPorts(sb.id), listed);

      // Revoked: the URL is gone; nothing left to revoke is not found.
      assert.equal(await sb.revokePort(8000), 1);
      const gone = await fetchPreview(pv.url!, svc.ca!);
      assert.equal(gone.status, 404);
      assert.match(gone.body, /no such preview/);
      assert.deepEqual(await sb.listPorts(), []);
      await assert.rejects(alice.revokePort(sb.id, 8000), (e: unknown) => e instanceof NotFoundError && e.status === 404);
    } finally {
      await sb.remove();
    }
  });

  it("name the service's TCP listener in the URL when asked on the unix socket", async (t) => {
    if (skipped(t, svc)) return;
    const sb = await svc.client.create({ listen: [8000] });
    try {
      assert.equal((await sb.exec(["sh", "-c", SERVE_8000])).exit_status, 0);
      const pv = await svc.client.exposePort(sb.id, { port: 8000 });
      assert.equal(pv.url, `${svc.url}/preview/${pv.token}/`);
      const left = Date.parse(pv.expires) - Date.now();
      assert.ok(left > 3_500_000 && left <= 3_600_000, `expires in ${left} ms (the default: an hour)`);
      assert.equal((await fetchPreview(pv.url!, svc.ca!)).status, 200);
      assert.equal(await svc.client.revokePort(sb.id, 8000), 1);
      await assert.rejects(sb.revokePort(8000), NotFoundError);
    } finally {
      await sb.remove();
    }
  });
});
