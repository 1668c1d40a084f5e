"""The asyncio client against the real service: create, exec with
callbacks and as an async iterator, stdin, files, timeouts, cancellation
(which interrupts the call), concurrency, runs and verification."""

import asyncio
import time
import unittest

from tests import harness
import opensandbox as o


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = harness.service()

    async def asyncSetUp(self):
        self.c = o.AsyncClient(self.svc.socket)

    async def asyncTearDown(self):
        await self.c.aclose()

    async def test_exec_and_files(self):
        async with await self.c.create() as sb:
            out, err = [], []

            async def on_err(b):
                err.append(b)
            r = await sb.exec(["sh", "-c", "cat; echo e >&2; exit 2"], stdin=b"async stdin",
                              on_stdout=out.append, on_stderr=on_err)
            self.assertEqual(r.exit_code, 2)
            self.assertEqual(b"".join(out), b"async stdin")
            self.assertEqual(err, [b"e\n"])
            self.assertEqual(await sb.write_file("a.txt", "async file"), 10)
            self.assertEqual(await sb.read_text("a.txt"), "async file")
            self.assertIn("a.txt", [e.name for e in await sb.list_files()])
            st = await sb.exec_stream(["sh", "-c", "echo 1; sleep 0.3; echo 2"])
            pieces = [p.data async for p in st]
            self.assertEqual(pieces, [b"1\n", b"2\n"])
            self.assertTrue(st.result.ok)
            snap = await sb.suspend()
            self.assertTrue(snap.root.startswith("b3:"))
            self.assertEqual((await self.c.get_sandbox(sb.id)).state, "suspended")
            self.assertEqual((await sb.resume(here=True)).state, "live")
            self.assertEqual(await sb.read_text("a.txt"), "async file")
        with self.assertRaises(o.NotFoundError):
            await self.c.get_sandbox(sb.id)

    async def test_timeout_and_cancellation_interrupt(self):
        async with await self.c.create() as sb:
            with self.assertRaises(o.ExecTimeout) as cm:
                await sb.exec(["sleep", "60"], timeout=1)
            self.assertEqual(cm.exception.result.outcome.status, "killed")
            task = asyncio.ensure_future(sb.exec(["sleep", "60"]))
            await asyncio.sleep(0.7)
            t0 = time.monotonic()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertLess(time.monotonic() - t0, 10)
            for _ in range(50):  # the interrupted exec ended in the service
                if (await sb.refresh()).running == 0:
                    break
                await asyncio.sleep(0.1)
            self.assertEqual(sb.info.running, 0)
            self.assertEqual(sb.info.execs, 2)

    async def test_concurrent_execs(self):
        async with await self.c.create() as sb:
            t0 = time.monotonic()
            rs = await asyncio.gather(*(sb.exec(["sh", "-c", "sleep 1; echo %d" % i]) for i in range(4)))
            self.assertEqual([r.stdout for r in rs], [b"%d\n" % i for i in range(4)])
            self.assertLess(time.monotonic() - t0, 3.5, "the four execs ran at once")

    async def test_run_verify_and_errors(self):
        r = await self.c.run(["/bin/echo", "async run"])
        self.assertEqual(r.stdout, b"async run\n")
        v = await self.c.verify_run(r)
        self.assertEqual(v.run, r.run)
        key = await self.c.host_key()
        v = await self.c.verify_run(r, trusted_keys=[key], fetch=True)  # from its bundle
        self.assertEqual(v.signer, key)
        self.assertGreater(len(await self.c.run_bundle(r.run)), 0)
        with self.assertRaises(o.NotFoundError):
            await self.c.get_sandbox("sb-000000000000")
        with self.assertRaises(o.NotFoundError):
            await self.c.exec("sb-000000000000", ["true"])
        seen = []
        f = await self.c.fleet(["/bin/echo"], inputs=["x", "y"], on_progress=seen.append)
        self.assertEqual(f.items, 2)
        self.assertEqual(seen[-1].done, 2)
        self.assertTrue((await self.c.health()).ok)


if __name__ == "__main__":
    unittest.main()
