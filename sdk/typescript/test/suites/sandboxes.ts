// Live sandboxes against the real service: create, list, exec with its
// output streamed and its stdin whole or streamed, exit codes, deadlines
// that reject, files, suspend and resume, close, and typed errors.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { PassThrough } from "node:stream";
import { before, describe, it } from "node:test";
import {
  AbortError,
  DeniedError,
  InvalidError,
  NotFoundError,
  OutputError,
  SandboxAPIError,
  TimeoutError,
  type Sandbox,
  type SandboxClient,
} from "@opensandbox/sdk";
import { service } from "../harness.js";

describe("live sandboxes", () => {
  let client: SandboxClient;
  let sb: Sandbox;

  before(async () => {
    client = (await service()).client;
    sb = await client.create({ tier: "S1", env: { GREETING: "hello" } });
  });

  it("creates an S1 sandbox with a workspace, and lists and gets it", async () => {
    assert.match(sb.id, /^sb-[0-9a-f]+$/);
    assert.equal(sb.info.tier, "S1");
    assert.equal(sb.info.state, "live");
    assert.ok(sb.workspace?.startsWith("/"));
    assert.ok(sb.info.grants.includes(`fs:${sb.workspace}:rw`));
    assert.ok((await client.list()).some((s) => s.id === sb.id));
    // A watch of the workspace sees a file an exec makes once it says it is in place.
    let inPlace!: () => void;
    const watching = new Promise<void>((r) => (inPlace = r));
    const watched = client.watch(
      sb.id,
      sb.workspace!,
      (e) => {
        if (e.op === "watching") inPlace();
        return !(e.op === "create" && e.path === sb.workspace + "/watched");
      },
      { recursive: true },
    );
    await watching;
    await sb.exec(["touch", sb.workspace + "/watched"]);
    assert.deepEqual(await watched, { op: "create", path: sb.workspace + "/watched" });
    await assert.rejects(client.watch(sb.id, "/etc", () => false), (err: Error) => err.name === "DeniedError");
    // One host, no cluster: ?here=true lists it too, on no other host.
    const here = await client.list({ here: true });
    assert.ok(here.some((s) => s.id === sb.id && s.host === undefined));
    const got = await client.get(sb.id);
    assert.equal(got.id, sb.id);
    assert.deepEqual(got.env, { GREETING: "hello" });
  });

  it("streams stdout and stderr as the program writes them, apart", async () => {
    const seen: { stream: string; text: string; at: number }[] = [];
    const start = Date.now();
    const call = sb.execStream(["sh", "-c", "echo one; echo oops >&2; sleep 1; echo two; echo $GREETING"]);
    for await (const c of call) seen.push({ stream: c.stream, text: c.data.toString(), at: Date.now() - start });
    const r = await call.result;
    const out = seen.filter((s) => s.stream === "stdout").map((s) => s.text).join("");
    const err = seen.filter((s) => s.stream === "stderr").map((s) => s.text).join("");
    assert.equal(out, "one\ntwo\nhello\n");
    assert.equal(err, "oops\n");
    const first = seen.find((s) => s.text.includes("one"))!;
    const second = seen.find((s) => s.text.includes("two"))!;
    // "one" came before the program slept: streamed, not buffered to the end.
    assert.ok(second.at - first.at >= 800, `one at ${first.at} ms, two at ${second.at} ms`);
    assert.equal(r.exit_status, 0);
    assert.equal(r.outcome?.status, "exited");
    assert.equal(r.sealed, true);
    assert.match(r.run!, /^b3:[0-9a-f]{64}$/);
  });

  it("resolves a stream's result whether it is iterated to the end, left early, or not at all", async () => {
    const many = ["sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); sleep 0.0005; done"];
    const notIterated = sb.execStream(many);
    assert.equal((await notIterated.result).exit_status, 0);
    const left = sb.execStream(many);
    for await (const c of left) {
      assert.equal(c.stream, "stdout");
      break;
    }
    assert.equal((await left.result).exit_status, 0);
  });

  it("gives output to callbacks and collects it otherwise", async () => {
    const parts: string[] = [];
    const r1 = await sb.exec(["sh", "-c", "printf abc; printf def >&2"], { onStdout: (b) => parts.push(b.toString()) });
    assert.equal(parts.join(""), "abc");
    assert.equal(r1.stdout, undefined);
    const r2 = await sb.exec(["sh", "-c", "printf abc; printf def >&2"]);
    assert.equal(r2.stdout?.toString(), "abc");
    assert.equal(r2.stderr?.toString(), "def");
  });

  it("reports exit codes as the guest's, and a program that cannot run as InvalidError 127", async () => {
    for (const code of [0, 1, 3, 42]) {
      const r = await sb.exec(["sh", "-c", `exit ${code}`]);
      assert.equal(r.exit_status, code);
      assert.equal(r.outcome?.exit_code, code);
      assert.equal(r.exit_status_from, "guest");
    }
    const killed = await sb.exec(["sh", "-c", "kill -9 $$"]);
    assert.equal(killed.exit_status, 137);
    await assert.rejects(sb.exec(["no-such-program-xyz"]), (e: unknown) => e instanceof InvalidError && e.status === 400 && e.exitStatus === 127);
  });

  it("gives stdin whole (text and bytes)", async () => {
    const r = await sb.exec({ args: ["tr", "a-z", "A-Z"], stdin: "shout this" });
    assert.equal(r.stdout?.toString(), "SHOUT THIS");
    const bytes = randomBytes(100_000);
    const r2 = await sb.exec({ args: ["sha256sum"], stdin: bytes });
    const { createHash } = await import("node:crypto");
    assert.equal(r2.stdout?.toString().split(" ")[0], createHash("sha256").update(bytes).digest("hex"));
  });

  it("streams stdin as the program reads it, while its output streams back", async () => {
    const stdin = new PassThrough();
    const call = sb.execStream({ args: ["sh", "-c", 'while read l; do echo "got $l"; done; echo bye'], stdin });
    const it = call[Symbol.asyncIterator]();
    stdin.write("first\n");
    // The answer to the first line comes before the second is sent: full duplex.
    const a = await it.next();
    assert.equal(a.value?.data.toString(), "got first\n");
    stdin.write("second\n");
    const b = await it.next();
    assert.equal(b.value?.data.toString(), "got second\n");
    stdin.end();
    let rest = "";
    for (let n = await it.next(); !n.done; n = await it.next()) rest += n.value.data.toString();
    assert.equal(rest, "bye\n");
    assert.equal((await call.result).exit_status, 0);
  });

  it("rejects with TimeoutError at its client-side deadline, with the sealed result", async () => {
    const t0 = Date.now();
    await assert.rejects(sb.exec(["sleep", "60"], { timeoutMs: 500 }), (e: unknown) => {
      assert.ok(e instanceof TimeoutError, String(e));
      assert.equal(e.result?.outcome?.status, "killed");
      assert.equal(e.result?.outcome?.detail, "interrupted");
      assert.equal(e.result?.outcome?.signal, 2); // SIGINT, as an interrupt gives it
      assert.match(e.result!.run!, /^b3:/);
      return true;
    });
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `took ${took} ms`);
    assert.equal((await client.get(sb.id)).running, 0);
  });

  it("rejects with TimeoutError even when the program ignores SIGINT", async () => {
    const t0 = Date.now();
    await assert.rejects(sb.exec(["sh", "-c", "trap '' INT; sleep 60"], { timeoutMs: 300 }), (e: unknown) => e instanceof TimeoutError);
    assert.ok(Date.now() - t0 < 15_000);
  });

  it("rejects with AbortError when its signal aborts", async () => {
    const ac = new AbortController();
    const p = sb.exec(["sleep", "60"], { signal: ac.signal });
    setTimeout(() => ac.abort(), 300);
    await assert.rejects(p, (e: unknown) => e instanceof AbortError && e.name === "AbortError" && e.result?.outcome?.status === "killed");
    const pre = AbortSignal.abort();
    await assert.rejects(sb.exec(["true"], { signal: pre }), AbortError);
  });

  it("interrupts a call by its key, and still resolves with its result", async () => {
    const call = sb.execStream(["sleep", "60"]);
    setTimeout(() => void call.interrupt(), 300);
    const r = await call.result;
    assert.equal(r.outcome?.status, "killed");
    await assert.rejects(client.interrupt("no-such-call-in-flight-0000"), NotFoundError);
  });

  it("ends with outcome deadline at the service's own deadline_ms", async () => {
    const r = await sb.exec({ args: ["sleep", "30"], deadline_ms: 300 });
    assert.equal(r.outcome?.status, "deadline");
    assert.equal(r.exit_status, 124);
  });

  it("interrupts the call when an output callback throws (OutputError)", async () => {
    await assert.rejects(
      sb.exec(["sh", "-c", "echo x; sleep 60"], {
        onStdout: () => {
          throw new Error("disk full");
        },
      }),
      (e: unknown) => e instanceof OutputError && (e.cause as Error).message === "disk full" && e.result?.outcome?.status === "killed",
    );
  });

  it("uploads, lists and downloads files, byte for byte", async () => {
    const data = randomBytes(300_000);
    const path = `${sb.workspace}/dir-test.bin`;
    assert.equal(await sb.upload(path, data, { mode: 0o600 }), data.length);
    const listing = await sb.listFiles(sb.workspace!);
    const f = listing.find((x) => x.name === "dir-test.bin");
    assert.ok(f, JSON.stringify(listing));
    assert.equal(f.size, data.length);
    assert.equal(f.mode, "-rw-------");
    assert.ok((await sb.download(path)).equals(data));
    // The program sees the same bytes.
    const r = await sb.exec(["sha256sum", path]);
    const { createHash } = await import("node:crypto");
    assert.equal(r.stdout?.toString().split(" ")[0], createHash("sha256").update(data).digest("hex"));
    // A file the program wrote comes back too, streamed.
    await sb.exec(["sh", "-c", `printf made-inside > ${sb.workspace}/inside.txt`]);
    const s = await sb.downloadStream(`${sb.workspace}/inside.txt`);
    let text = "";
    for await (const c of s) text += c.toString();
    assert.equal(text, "made-inside");
  });

  it("uploads a stream", async () => {
    const src = new PassThrough();
    const p = sb.upload(`${sb.workspace}/streamed.txt`, src);
    src.write("part one, ");
    setTimeout(() => src.end("part two"), 50);
    assert.equal(await p, 18);
    assert.equal((await sb.download(`${sb.workspace}/streamed.txt`)).toString(), "part one, part two");
  });

  it("refuses paths outside its grants (DeniedError), relative paths (InvalidError) and missing files (NotFoundError)", async () => {
    await assert.rejects(sb.upload("/etc/evil", "x"), (e: unknown) => e instanceof DeniedError && e.status === 403 && e.category === "denied");
    await assert.rejects(sb.download("relative/path"), (e: unknown) => e instanceof InvalidError && e.status === 400);
    await assert.rejects(sb.download(`${sb.workspace}/absent`), (e: unknown) => e instanceof NotFoundError && e.status === 404);
  });

  it("forks a sandbox into sandboxes of its state, each its own, the parent running on", async () => {
    const box = await client.create();
    await box.upload(`${box.workspace}/state.txt`, "the parent's");
    const f = await box.fork(2);
    assert.equal(f.parent, box.id);
    assert.equal(f.children.length, 2);
    assert.match(f.head, /^b3:[0-9a-f]{64}$/);
    assert.match(f.snapshot.root, /^b3:[0-9a-f]{64}$/);
    const rec = (await client.records()).find((x) => x.id === box.id);
    assert.equal(rec?.head, f.head);
    for (const ch of f.children) {
      assert.equal(ch.error, undefined, JSON.stringify(ch));
      assert.equal(ch.sandbox?.state, "live");
      const child = client.sandbox(ch.id);
      assert.equal((await child.download(`${ch.sandbox!.workspace}/state.txt`)).toString(), "the parent's");
      await child.upload(`${ch.sandbox!.workspace}/state.txt`, "the child's");
      await child.remove();
    }
    assert.equal((await box.download(`${box.workspace}/state.txt`)).toString(), "the parent's");
    const parked = await client.fork(box.id, { count: 1, suspended: true });
    assert.equal(parked.children[0]?.sandbox?.state, "suspended");
    await client.closeRecord(parked.children[0]!.id);
    for (const count of [0, 65]) {
      await assert.rejects(box.fork(count), (e: unknown) => e instanceof InvalidError && e.status === 400 && /field "count"/.test(e.message));
    }
    await assert.rejects(client.fork("sb-000000000000", { count: 1 }), (e: unknown) => e instanceof NotFoundError && e.status === 404);
    await box.close();
    await assert.rejects(box.fork(1), (e: unknown) => e instanceof InvalidError && /is closed/.test(e.message));
  });

  it("keeps its workspace's files across suspend and resume", async () => {
    const box = await client.create();
    const before = box.workspace!;
    await box.upload(`${before}/keep.txt`, "kept across suspension");
    await box.exec(["sh", "-c", `mkdir -p ${before}/d && echo nested > ${before}/d/n.txt`]);
    const snap = await box.suspend();
    assert.match(snap.root, /^b3:[0-9a-f]{64}$/);
    assert.match(snap.manifest, /^b3:[0-9a-f]{64}$/);
    const listed = (await client.list()).find((s) => s.id === box.id);
    assert.equal(listed?.state, "suspended");
    await assert.rejects(box.exec(["true"]), (e: unknown) => e instanceof InvalidError && /suspended/.test(e.message));
    const info = await box.resume();
    assert.equal(info.state, "live");
    assert.equal(info.id, box.id);
    const after = box.workspace!;
    assert.equal((await box.download(`${after}/keep.txt`)).toString(), "kept across suspension");
    const r = await box.exec(["cat", `${after}/d/n.txt`]);
    assert.equal(r.stdout?.toString(), "nested\n");
    await box.close();
    assert.ok(!(await client.list()).some((s) => s.id === box.id));
    const rec = (await client.records()).find((x) => x.id === box.id);
    assert.equal(rec?.phase, "closed");
    assert.ok(rec!.executed >= 2, JSON.stringify(rec));
  });

  it("gets a suspended sandbox by its id, and resumes it with here (one host: as a resume)", async () => {
    const box = await client.create();
    await box.upload(`${box.workspace}/here.txt`, "resumed here");
    await box.suspend();
    const got = await client.get(box.id);
    assert.equal(got.id, box.id);
    assert.equal(got.state, "suspended");
    assert.ok(Array.isArray(got.grants), JSON.stringify(got));
    assert.equal((await box.refresh()).state, "suspended");
    assert.equal((await client.list()).find((s) => s.id === box.id)?.state, "suspended");
    const info = await box.resume({ here: true });
    assert.equal(info.id, box.id);
    assert.equal(info.state, "live");
    assert.equal((await client.get(box.id)).state, "live");
    assert.equal((await box.download(`${box.workspace}/here.txt`)).toString(), "resumed here");
    assert.equal((await box.exec(["cat", `${box.workspace}/here.txt`])).stdout?.toString(), "resumed here");
    // Suspended again and resumed without it: the same.
    await box.suspend();
    assert.equal((await client.resume(box.id)).state, "live");
    await box.close();
    await assert.rejects(client.get(box.id), NotFoundError);
  });

  it("closes a sandbox (DELETE): gone from the list, and then not found", async () => {
    const box = await client.create();
    await box.remove();
    assert.ok(!(await client.list()).some((s) => s.id === box.id));
    await assert.rejects(client.get(box.id), NotFoundError);
  });

  it("answers an unknown sandbox with NotFoundError (status 404, category not-found) for every call", async () => {
    const ghost = client.sandbox("sb-000000000000");
    const calls = [() => client.get(ghost.id), () => ghost.exec(["true"]), () => ghost.remove(), () => ghost.download("/tmp/x"), () => ghost.suspend(), () => client.resume(ghost.id), () => ghost.resume({ here: true })];
    for (const call of calls) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof NotFoundError, String(e));
        assert.ok(e instanceof SandboxAPIError);
        assert.equal(e.status, 404);
        assert.equal(e.category, "not-found");
        assert.ok(e.message.length > 0);
        return true;
      });
    }
  });

  it("refuses a bad spec with InvalidError naming the field", async () => {
    await assert.rejects(client.create({ tier: "S9" }), (e: unknown) => e instanceof InvalidError && /tier/.test(e.message));
    await assert.rejects(client.create({ grants: ["fs:relative:ro"] }), (e: unknown) => e instanceof InvalidError && /grants/.test(e.message));
  });

  it("removes the sandbox at the end", async () => {
    await sb.remove();
    await assert.rejects(sb.refresh(), NotFoundError);
  });
});
