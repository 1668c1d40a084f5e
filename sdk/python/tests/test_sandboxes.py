"""Live sandboxes through a real ``sandbox serve`` on its unix socket:
create, exec (streaming, stdin, exit codes, timeouts, interrupts), files,
suspend and resume, close, pools, records, fleets, typed errors."""

import io
import os
import threading
import time
import unittest

from tests import harness
import opensandbox as o


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = harness.service()
        cls.c = cls.svc.client()
        cls.sb = cls.c.create(env={"GREETING": "hello"})

    @classmethod
    def tearDownClass(cls):
        try:
            cls.sb.remove()
        except o.NotFoundError:
            pass
        cls.c.close()

    # ---------------------------------------------------------------- basics
    def test_watch(self):
        """A watch of the workspace sees a file an exec makes, once the
        watch says it is in place; returning False ends it; a watch of a
        path outside the grants is refused before anything streams."""
        import queue
        import threading
        ws = self.c.get_sandbox(self.sb.id).workspace
        seen, ready = queue.Queue(), threading.Event()

        def on_event(e):
            if e.op == "watching":
                ready.set()
                return None
            seen.put(e)
            return False if e.path == ws + "/watched" else None
        t = threading.Thread(target=lambda: seen.put(self.c.watch(self.sb.id, ws, on_event, recursive=True, timeout=60)))
        t.start()
        self.assertTrue(ready.wait(30), "the watch never said it was in place")
        self.sb.exec(["touch", ws + "/watched"])
        t.join(60)
        events = []
        while not seen.empty():
            events.append(seen.get())
        self.assertIn(o.WatchEvent(op="create", path=ws + "/watched"), events)
        with self.assertRaises(o.DeniedError):
            self.c.watch(self.sb.id, "/etc", lambda e: False)

    def test_health_and_listing(self):
        h = self.c.health()
        self.assertTrue(h.ok)
        self.assertGreaterEqual(h.sandboxes, 1)
        ids = [s.id for s in self.c.list_sandboxes()]
        self.assertIn(self.sb.id, ids)
        # One host, no cluster: ?here=true lists the same, none on another host.
        here = self.c.list_sandboxes(here=True)
        self.assertEqual([s.id for s in here], ids)
        self.assertEqual([s.host for s in here], [""] * len(here))
        info = self.c.get_sandbox(self.sb.id)
        self.assertEqual(info.state, "live")
        self.assertEqual(info.tier, "S1")
        self.assertTrue(info.workspace.startswith(self.svc.tmp), info.workspace)
        self.assertIn("fs:%s:rw" % info.workspace, info.grants)
        self.assertIsNotNone(o.parse_time(info.created))
        self.assertIn("/v1/sandboxes/{id}/exec", self.c.openapi()["paths"])
        self.assertIn("sandbox_live_sandboxes", self.c.metrics())

    # ---------------------------------------------------------------- exec
    def test_exec_output_exit_code_env_and_dir(self):
        r = self.sb.exec(["sh", "-c", 'echo "$GREETING $X"; pwd; echo oops >&2; exit 3'], env={"X": "there"})
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.exit_status, 3)
        self.assertEqual(r.exit_status_from, "guest")
        self.assertFalse(r.ok)
        self.assertEqual(r.stdout, ("hello there\n%s\n" % self.sb.workspace).encode())
        self.assertEqual(r.stderr, b"oops\n")
        self.assertTrue(r.sealed)
        self.assertTrue(r.run.startswith("b3:"))
        self.assertEqual(self.sb.exec(["pwd"], dir="/tmp").stdout, b"/tmp\n")
        self.assertTrue(self.sb.exec(["true"]).ok)

    def test_exec_streams_as_it_comes(self):
        script = "echo one; sleep 1; echo two >&2; sleep 0.2; echo three"
        pieces, t0 = [], time.monotonic()
        with self.sb.exec_stream(["sh", "-c", script]) as st:
            for p in st:
                pieces.append((time.monotonic() - t0, p.stream, p.data))
        self.assertEqual([(s, d) for _, s, d in pieces],
                         [("stdout", b"one\n"), ("stderr", b"two\n"), ("stdout", b"three\n")])
        # the first piece came a second before the last: streamed, not buffered
        self.assertGreater(pieces[-1][0] - pieces[0][0], 0.8, pieces)
        self.assertEqual(st.result.exit_code, 0)
        self.assertEqual(st.result.stdout, b"one\nthree\n")

    def test_exec_callbacks_and_writers(self):
        got, buf, text = [], io.BytesIO(), io.StringIO()
        r = self.sb.exec(["sh", "-c", "printf 'a\\n'; printf 'b\\n' >&2"], on_stdout=got.append, stdout=buf,
                         stderr=text, capture=False)
        self.assertEqual(got, [b"a\n"])
        self.assertEqual(buf.getvalue(), b"a\n")
        self.assertEqual(text.getvalue(), "b\n")
        self.assertEqual(r.stdout, b"")  # not captured

    def test_exec_stdin_whole_and_streamed(self):
        self.assertEqual(self.sb.exec(["cat"], stdin="whole stdin").stdout, b"whole stdin")
        big = os.urandom(3 << 20)
        r = self.sb.exec(["sh", "-c", "sha256sum | cut -c1-64"], stdin=io.BytesIO(big))
        import hashlib
        self.assertEqual(r.stdout.strip().decode(), hashlib.sha256(big).hexdigest())
        # an iterable, and a program that stops reading early: the call still ends
        chunks = (b"x" * 65536 for _ in range(200))
        r = self.sb.exec(["head", "-c", "10"], stdin=chunks, timeout=60)
        self.assertEqual(r.stdout, b"x" * 10)

    def test_exit_by_signal(self):
        r = self.sb.exec(["sh", "-c", "kill -9 $$"])
        self.assertEqual(r.outcome.status, "killed")
        self.assertEqual(r.exit_status, 137)
        self.assertIsNone(r.exit_code)

    def test_service_side_deadline(self):
        r = self.sb.exec(["sleep", "10"], deadline_ms=300)
        self.assertEqual(r.outcome.status, "deadline")
        self.assertEqual(r.exit_status, 124)

    def test_timeout_raises_and_interrupts(self):
        t0 = time.monotonic()
        with self.assertRaises(o.ExecTimeout) as cm:
            self.sb.exec(["sh", "-c", "echo started; sleep 60"], timeout=1.5)
        took = time.monotonic() - t0
        self.assertLess(took, 10, "the timeout must not hang")
        e = cm.exception
        self.assertEqual(e.stdout, b"started\n")
        self.assertIsNotNone(e.result, "the interrupted call's sealed result")
        self.assertEqual(e.result.outcome.status, "killed")
        self.assertTrue(e.result.sealed)
        self.assertIsInstance(e, TimeoutError)
        # a silent program (no frame, so no HTTP head yet) times out the same
        with self.assertRaises(o.ExecTimeout) as cm:
            self.sb.exec(["sleep", "60"], timeout=1)
        self.assertEqual(cm.exception.result.outcome.status, "killed")
        for _ in range(40):  # nothing of either is left running in the sandbox
            if self.c.get_sandbox(self.sb.id).running == 0:
                break
            time.sleep(0.05)
        self.assertEqual(self.c.get_sandbox(self.sb.id).running, 0)

    def test_interrupt_by_key_from_another_thread(self):
        st = self.sb.exec_stream(["sleep", "30"], interrupt_key="test-key-" + "k" * 16)
        self.assertEqual(st.key, "test-key-" + "k" * 16)
        timer = threading.Timer(0.5, lambda: self.c.interrupt(st.key))
        t0 = time.monotonic()
        timer.start()
        r = st.wait()
        timer.join()
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(r.outcome.status, "killed")
        self.assertEqual(r.outcome.detail, "interrupted")
        self.assertEqual(r.exit_status, 130)
        with self.assertRaises(o.NotFoundError):
            self.c.interrupt("no-such-call-in-flight-000")

    def test_leaving_a_stream_early_interrupts_it(self):
        with self.sb.exec_stream(["sh", "-c", "echo go; sleep 30"]) as st:
            self.assertEqual(next(iter(st)).data, b"go\n")
        self.assertEqual(st.result.outcome.status, "killed")

    def test_output_error_interrupts(self):
        def boom(_):
            raise RuntimeError("reader went away")
        with self.assertRaises(o.OutputError) as cm:
            self.sb.exec(["sh", "-c", "echo x; sleep 30"], on_stdout=boom)
        self.assertIsInstance(cm.exception.__cause__, RuntimeError)
        self.assertEqual(cm.exception.result.outcome.status, "killed")

    def test_check_raises_command_failed(self):
        with self.assertRaises(o.CommandFailed) as cm:
            self.sb.exec(["false"], check=True)
        self.assertEqual(cm.exception.result.exit_code, 1)
        self.assertTrue(self.sb.exec(["true"], check=True).ok)

    def test_exec_errors(self):
        with self.assertRaises(o.InvalidError) as cm:
            self.sb.exec(["no-such-program-here"])
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.category, "invalid")
        self.assertEqual(cm.exception.exit_status, 127)
        with self.assertRaises(o.InvalidError) as cm:
            self.sb.exec(["true"], interrupt_key="short")
        self.assertIn("interrupt_key", cm.exception.message)
        with self.assertRaises(TypeError):
            self.sb.exec("echo hi")

    # ---------------------------------------------------------------- files
    def test_files_round_trip(self):
        data = bytes(range(256)) * 1000
        self.assertEqual(self.sb.write_file("sub-free.bin", data, mode=0o600), len(data))
        self.assertEqual(self.sb.read_file("sub-free.bin"), data)
        self.assertEqual(self.sb.read_file(self.sb.path("sub-free.bin")), data)
        out = io.BytesIO()
        self.assertEqual(self.sb.read_file("sub-free.bin", dest=out), len(data))
        self.assertEqual(out.getvalue(), data)
        entries = {e.name: e for e in self.sb.list_files()}
        self.assertEqual(entries["sub-free.bin"].size, len(data))
        self.assertEqual(entries["sub-free.bin"].mode, "-rw-------")
        # the program sees what was uploaded, and the SDK what it wrote
        self.assertEqual(self.sb.exec(["sha256sum", "sub-free.bin"]).stdout.split()[0].decode(),
                         __import__("hashlib").sha256(data).hexdigest())
        self.sb.exec(["sh", "-c", "mkdir -p d && printf made > d/by-guest.txt"])
        self.assertEqual(self.sb.read_text("d/by-guest.txt"), "made")
        self.assertTrue([e for e in self.sb.list_files() if e.name == "d" and e.dir])
        # streamed upload from a file object
        self.assertEqual(self.sb.write_file("streamed.bin", io.BytesIO(b"s" * 300000)), 300000)
        self.assertEqual(len(self.sb.read_file("streamed.bin")), 300000)

    def test_file_errors(self):
        with self.assertRaises(o.DeniedError) as cm:
            self.sb.read_file("/etc/passwd")
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(o.NotFoundError):
            self.sb.read_file("no-such-file")
        with self.assertRaises(o.InvalidError):
            self.c.download(self.sb.id, "relative/path")
        with self.assertRaises(o.DeniedError):
            self.sb.write_file("/etc/evil", b"x")
        self.sb.exec(["ln", "-sf", "/etc/passwd", "link"])
        with self.assertRaises(o.DeniedError):  # a link on the way is refused, never followed
            self.sb.read_file("link")

    # ---------------------------------------------------------------- lifecycle
    def test_suspend_resume_keeps_a_file(self):
        sb = self.c.create()
        try:
            sb.write_file("keep.txt", b"kept across suspension")
            sb.exec(["sh", "-c", "echo from-guest > guest.txt"])
            old = sb.workspace
            snap = sb.suspend()
            self.assertTrue(snap.root.startswith("b3:"))
            self.assertEqual(sb.info.state, "suspended")
            listed = {s.id: s for s in self.c.list_sandboxes()}
            self.assertEqual(listed[sb.id].state, "suspended")
            got = self.c.get_sandbox(sb.id)  # by its id too, as the list shows it
            self.assertEqual((got.id, got.state, got.tier), (sb.id, "suspended", "S1"))
            self.assertEqual(got.grants, listed[sb.id].grants)
            self.assertIsInstance(got.raw["grants"], list)
            self.assertEqual(sb.refresh().state, "suspended")
            with self.assertRaises(o.InvalidError):
                self.c.exec(sb.id, ["true"])
            info = sb.resume()
            self.assertEqual(info.state, "live")
            self.assertNotEqual(info.workspace, old)  # restored at a new path
            self.assertEqual(sb.read_file("keep.txt"), b"kept across suspension")
            self.assertEqual(sb.exec(["cat", "guest.txt"]).stdout, b"from-guest\n")
            rec = [r for r in self.c.records() if r.id == sb.id][0]
            self.assertEqual(rec.phase, "active")
            self.assertGreaterEqual(rec.executed, 2)
        finally:
            sb.close()
        with self.assertRaises(o.NotFoundError):
            self.c.get_sandbox(sb.id)
        rec = [r for r in self.c.records() if r.id == sb.id][0]
        self.assertEqual(rec.phase, "closed")

    def test_resume_here_on_a_single_host_is_resume(self):
        sb = self.c.create()
        try:
            sb.write_file("here.txt", b"resumed here")
            sb.suspend()
            h = self.c.sandbox(sb.id)  # a handle on a suspended sandbox, read by its id
            self.assertEqual(h.info.state, "suspended")
            n = len(harness.SENT)
            info = h.resume(here=True)
            self.assertIn(("POST /v1/sandboxes/{id}/resume", "POST", "/v1/sandboxes/%s/resume?here=true" % sb.id),
                          harness.SENT[n:])
            self.assertEqual((info.id, info.state), (sb.id, "live"))
            self.assertEqual(h.read_file("here.txt"), b"resumed here")
            self.assertEqual(h.exec(["cat", "here.txt"]).stdout, b"resumed here")
            self.assertEqual(self.c.get_sandbox(sb.id).state, "live")
            with self.assertRaises(o.InvalidError):  # a live one: nothing to resume, here or not
                self.c.resume(sb.id, here=True)
        finally:
            sb.close()
        with self.assertRaises(o.InvalidError):  # its record is closed
            self.c.resume(sb.id, here=True)

    def test_fork(self):
        sb = self.c.create()
        try:
            sb.write_file("state.txt", b"the parent's")
            f = sb.fork(2)
            self.assertEqual((f.parent, len(f.children), f.failed), (sb.id, 2, []))
            self.assertTrue(f.head.startswith("b3:") and f.genesis.startswith("b3:") and f.snapshot.root.startswith("b3:"))
            rec = [r for r in self.c.records() if r.id == sb.id][0]
            self.assertEqual(rec.head, f.head)  # the head each child's record cites
            for child in f.made:
                self.assertNotIn(child.id, (sb.id,))
                self.assertEqual(child.state, "live")
                h = self.c.sandbox(child.id)
                self.assertEqual(h.read_file("state.txt"), b"the parent's")
                h.write_file("state.txt", b"the child's")
            self.assertEqual(sb.read_file("state.txt"), b"the parent's")  # it ran on, unchanged
            parked = self.c.fork(sb.id, 1, suspended=True)
            self.assertEqual(parked.children[0].sandbox.state, "suspended")
            info = self.c.resume(parked.children[0].id)
            self.assertEqual(self.c.sandbox(info.id).read_file("state.txt"), b"the parent's")
            for bad in (0, o.MAX_FORK + 1):
                with self.assertRaises(o.InvalidError) as cm:
                    sb.fork(bad)
                self.assertIn('field "count"', cm.exception.message)
            with self.assertRaises(o.NotFoundError):
                self.c.fork("sb-000000000000", 1)
            for child in f.made + [info]:
                self.c.remove_sandbox(child.id)
        finally:
            sb.close()
        with self.assertRaises(o.InvalidError) as cm:  # its run ended
            self.c.fork(sb.id, 1)
        self.assertIn("is closed", cm.exception.message)

    def test_close_and_remove(self):
        with self.c.create() as sb:
            self.assertTrue(sb.exec(["true"]).ok)
        with self.assertRaises(o.NotFoundError):
            self.c.get_sandbox(sb.id)
        with self.assertRaises(o.NotFoundError):
            self.c.exec(sb.id, ["true"])
        with self.assertRaises(o.NotFoundError):
            self.c.remove_sandbox(sb.id)

    def test_unknown_sandbox_is_not_found(self):
        for call in (lambda: self.c.get_sandbox("sb-000000000000"),
                     lambda: self.c.exec("sb-000000000000", ["true"]),
                     lambda: self.c.upload("sb-000000000000", "/x", b""),
                     lambda: self.c.suspend("sb-000000000000"),
                     lambda: self.c.sandbox("sb-000000000000")):
            with self.assertRaises(o.NotFoundError) as cm:
                call()
            self.assertEqual(cm.exception.status, 404)
            self.assertEqual(cm.exception.category, "not-found")

    def test_bad_input(self):
        with self.assertRaises(o.InvalidError) as cm:
            self.c.create(tier="S9")
        self.assertIn("tier", cm.exception.message)
        with self.assertRaises(o.InvalidError):
            self.c.create(grants=["fs:relative:ro"])
        with self.assertRaises(o.InvalidError):
            self.c.run_report("not-an-address")
        with self.assertRaises(o.NotFoundError):
            self.c.run_report("b3:" + "00" * 31 + "01")

    def test_narrowed_policy_is_enforced(self):
        with self.c.create(grants=["fs:/etc:ro"]) as sb:  # the operator may grant it
            self.assertIn(b"root", sb.read_file("/etc/passwd"))
        narrow = self.c.narrowed({"type": "sandbox.policy/1", "paths": []})
        with self.assertRaises(o.DeniedError) as cm:
            narrow.create(grants=["fs:/etc:ro"])
        self.assertIn("fs:/etc:ro", cm.exception.message)

    @unittest.skipUnless(__import__("shutil").which("git"), "git is not installed: nothing to seed from")
    def test_seed_and_preservation_receipt(self):
        import subprocess
        import tempfile
        repo = tempfile.mkdtemp(dir=self.svc.root)
        os.chmod(repo, 0o755)
        git = ["git", "-C", repo, "-c", "user.email=t@example.org", "-c", "user.name=t"]
        subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
        with open(os.path.join(repo, "seeded.txt"), "w") as f:
            f.write("from the checkout\n")
        subprocess.run(git + ["add", "seeded.txt"], check=True)
        subprocess.run(git + ["commit", "-qm", "init"], check=True)
        head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
        claim = o.Claim(run="run-1", requester="alice", thread="t-1", repository="example/repo", ref="main", head=head)
        with self.c.create(grants=["fs:%s:ro" % repo]) as sb:
            s = sb.seed(repo, "main", claim=claim)
            self.assertEqual((s.sandbox, s.state, s.head), (sb.id, "bound", head))
            self.assertEqual(s.incarnation, sb.info.incarnation)
            self.assertEqual(sb.exec(["cat", "seeded.txt"]).stdout, b"from the checkout\n")
            rec = sb.preservation(claim, repo)
            self.assertEqual(rec.sandbox, sb.id)
            self.assertIn(rec.state, ("present", "lost", "unknown"))
            self.assertTrue(rec.reason)
            with self.assertRaises(o.NotFoundError):  # another source: nothing disclosed
                sb.preservation(claim, repo + "-other")

    # ---------------------------------------------------------------- pools, fleets
    def test_pool_claim(self):
        pools = {p.name: p for p in self.c.pools()}
        self.assertIn("warm", pools)
        self.assertEqual(pools["warm"].size, 1)
        with self.c.claim("warm") as sb:
            self.assertEqual(sb.info.state, "live")
            self.assertEqual(sb.exec(["echo", "claimed"]).stdout, b"claimed\n")
        self.assertGreaterEqual({p.name: p for p in self.c.pools()}["warm"].claims, 1)
        with self.assertRaises(o.NotFoundError):
            self.c.claim("no-such-pool")

    def test_fleet_with_progress(self):
        seen = []
        f = self.c.fleet(["/bin/echo"], inputs=["a", "b", "c"], workers=2, on_progress=seen.append)
        self.assertEqual(f.items, 3)
        self.assertEqual(f.failed, 0)
        self.assertTrue(f.id.startswith("fl-"))
        self.assertIn(f.id, f.checkpoint)
        self.assertEqual(seen[-1], o.FleetProgress(3, 3))
        f = self.c.fleet(units=[["/bin/true"], ["/bin/false"]])
        self.assertEqual((f.items, f.failed), (2, 1))
        with self.assertRaises(o.InvalidError):
            self.c.fleet(["/bin/echo"])  # no inputs


if __name__ == "__main__":
    unittest.main()
