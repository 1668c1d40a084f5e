"""One-shot sealed runs through a real service, and their offline
verification: a run verifies with the service's published key, from its
run directory or from its bundle (GET /v1/runs/{id}/bundle), and a
tampered attestation, receipt, output or bundle is refused."""

import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
import unittest

from tests import harness
import opensandbox as o
from opensandbox import crypto, verify


class RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = harness.service()
        cls.c = cls.svc.client()
        cls.key = cls.c.host_key()
        cls.r = cls.c.run(["/bin/sh", "-c", "echo sealed output; echo to stderr >&2; exit 7"])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def copy_run(self):
        d = os.path.join(self.tmp, "run")
        shutil.copytree(self.r.records, d)
        return d

    def test_one_shot_run(self):
        r = self.r
        self.assertTrue(r.sealed)
        self.assertEqual(r.exit_code, 7)
        self.assertEqual(r.stdout, b"sealed output\n")
        self.assertEqual(r.stderr, b"to stderr\n")
        self.assertEqual(r.tier, "S1")
        self.assertGreater(r.energy_uj, 0)
        self.assertTrue(os.path.isdir(r.records))
        rep = self.c.run_report(r.run)
        self.assertTrue(rep.verified, rep.problems)
        self.assertEqual(rep.outcome.exit_code, 7)
        with open(os.path.join(self.svc.home, "host.pub")) as f:
            self.assertEqual(f.read().strip(), self.key)

    def test_run_options(self):
        d = os.path.join(self.tmp, "data")
        os.makedirs(d)
        with open(os.path.join(d, "in.txt"), "w") as f:
            f.write("granted file\n")
        os.chmod(self.tmp, 0o755)
        r = self.c.run(["cat", os.path.join(d, "in.txt")], grants=["fs:%s:ro" % d], limits=o.Limits(pids=64),
                       deadline_ms=20000)
        self.assertEqual(r.stdout, b"granted file\n")
        r = self.c.run(["cat", os.path.join(d, "in.txt")])  # not granted: the guest cannot see it
        self.assertNotEqual(r.exit_code, 0)
        self.assertEqual(self.c.run(["cat"], stdin=b"one-shot stdin").stdout, b"one-shot stdin")
        with self.assertRaises(o.InvalidError) as cm:
            self.c.run(["true"], limits={"memory_bytes": 1024})
        self.assertIn("limits.memory_bytes", cm.exception.message)
        with self.assertRaises(o.InvalidError):
            self.c.run(["true"], grants=["fs:relative:ro"])
        with self.assertRaises(o.ExecTimeout) as cm:
            self.c.run(["sleep", "60"], timeout=1)
        self.assertEqual(cm.exception.result.outcome.status, "killed")

    def test_verify_offline(self):
        v = self.c.verify_run(self.r)  # the published key, the received output checked too
        self.assertEqual(v.run, self.r.run)
        self.assertEqual(v.signer, self.key)
        self.assertEqual(v.claim["outcome"], {"status": "exited", "exit_code": 7})
        self.assertEqual(v.outcome["stdout_len"], len(b"sealed output\n"))
        self.assertIn("the stdout received: the sealed stream", v.checked)
        v2 = verify.verify_run_dir(self.r.records, [self.key], expect_run=self.r.run)
        self.assertEqual(v2.energy_uj, self.r.energy_uj)
        # an exec's run (attestation /2, citing its sandbox's record) verifies too
        with self.c.create() as sb:
            r = sb.exec(["echo", "exec"])
        self.assertEqual(self.c.verify_run(r).type, "sandbox.attestation/2")

    def test_tampered_attestation_is_refused(self):
        d = self.copy_run()
        p = os.path.join(d, "attestation.json")
        with open(p, "rb") as f:
            env = json.loads(f.read())
        env["claim"]["outcome"]["exit_code"] = 0  # still canonical, no longer what was signed
        with open(p, "wb") as f:
            f.write(crypto.jcs(env).encode())
        with self.assertRaises(o.VerificationError) as cm:
            self.c.verify_run(self.r.run, records_dir=d)
        self.assertEqual(cm.exception.code, "signature")
        # and the same bytes re-serialized non-canonically
        with open(p, "wb") as f:
            f.write(json.dumps(env, indent=1).encode())
        with self.assertRaises(o.VerificationError) as cm:
            self.c.verify_run(self.r.run, records_dir=d)
        self.assertEqual(cm.exception.code, "non-canonical")

    def test_tampered_records_are_refused(self):
        cases = [
            ("stdout.log", lambda b: b.replace(b"sealed", b"SEALED"), "address"),
            ("stdout.log", lambda b: b + b"more\n", "extended"),
            ("stderr.log", lambda b: b[:-1], "truncated"),
            ("unit.json", lambda b: b.replace(b'"kind"', b'"kind" '), "address"),
            ("receipt.cose", lambda b: b[:-1] + bytes([b[-1] ^ 1]), "address"),
        ]
        for name, change, code in cases:
            with self.subTest(name=name, code=code):
                d = self.copy_run()
                p = os.path.join(d, name)
                with open(p, "rb") as f:
                    data = f.read()
                with open(p, "wb") as f:
                    f.write(change(data))
                with self.assertRaises(o.VerificationError) as cm:
                    verify.verify_run_dir(d, [self.key], expect_run=self.r.run)
                self.assertEqual(cm.exception.code, code)
                shutil.rmtree(d)
        d = self.copy_run()
        with open(os.path.join(d, "extra.txt"), "w") as f:
            f.write("stray")
        with self.assertRaises(o.VerificationError) as cm:
            verify.verify_run_dir(d, [self.key])
        self.assertEqual(cm.exception.code, "unrecognised")

    def test_wrong_key_received_output_and_run_id(self):
        with self.assertRaises(o.VerificationError) as cm:
            self.c.verify_run(self.r, trusted_keys=[harness.other_key()])
        self.assertEqual(cm.exception.code, "untrusted-key")
        with self.assertRaises(o.VerificationError) as cm:
            self.c.verify_run(self.r.run, records_dir=self.r.records, stdout=b"other output\n")
        self.assertEqual(cm.exception.code, "address")
        other = self.c.run(["true"])
        with self.assertRaises(o.VerificationError) as cm:
            self.c.verify_run(other.run, records_dir=self.r.records)
        self.assertEqual(cm.exception.code, "address")

    def test_jcp_operations_answer(self):
        """Each JCP operation reaches its handler (its refusal of a chain that
        does not open is the handler's, with its code, not a missing route)."""
        info = self.c.jcp_info()
        self.assertEqual(info.key, self.key)
        self.assertIsInstance(info.roots, list)
        self.assertTrue(self.c.jcp_ledger()["head"].startswith("b3:"))
        self.assertTrue(self.c.jcp_verify_ledger()["ok"])
        v = self.c.jcp_verify_chain([b"x"])
        self.assertEqual((v["ok"], v["refusal"]["code"]), (False, "truncated"))
        self.assertEqual(self.c.jcp_event("no-policy-names-this"), {"minted": [], "refused": []})
        for name, call in (("admit", lambda: self.c.jcp_admit([b"x"])),
                           ("budgets", lambda: self.c.jcp_budgets([b"x"])),
                           ("revoke", lambda: self.c.jcp_revoke([b"x"], b"r")),
                           ("amend", lambda: self.c.jcp_amend([b"x"], b"a")),
                           ("policy", lambda: self.c.jcp_policy([b"x"])),
                           ("checkpoint", lambda: self.c.jcp_checkpoint([b"x"], b"c"))):
            with self.subTest(name):
                with self.assertRaises(o.InvalidError) as cm:
                    call()
                self.assertEqual(cm.exception.code, "truncated")
                self.assertIn('field "chain[0]"', cm.exception.message)

    # ---------------------------------------------------------------- bundles
    def bundle(self):
        """The run's bundle, as the service serves it: a list of (TarInfo, bytes)."""
        b = self.c.run_bundle(self.r.run)
        with tarfile.open(fileobj=io.BytesIO(b), mode="r:") as tf:
            return [(m, tf.extractfile(m).read() if m.isreg() else b"") for m in tf.getmembers()]

    @staticmethod
    def tar(entries):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for m, data in entries:
                m.size = len(data) if m.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
                tf.addfile(m, io.BytesIO(data) if m.size else None)
        return out.getvalue()

    @staticmethod
    def entry(name, type=tarfile.REGTYPE, linkname=""):
        m = tarfile.TarInfo(name)
        m.type, m.linkname, m.mode = type, linkname, 0o600
        return m

    def test_the_bundle_verifies(self):
        hexid = self.r.run[3:]
        es = self.bundle()
        names = sorted(m.name for m, _ in es)
        self.assertEqual(names, sorted("runs/%s/%s" % (hexid, n) for n in os.listdir(self.r.records)))
        self.assertTrue(all(m.isreg() for m, _ in es))
        v = verify.verify_run_bundle(self.tar(es), [self.key], self.r.run, stdout=self.r.stdout)
        self.assertEqual((v.run, v.signer), (self.r.run, self.key))
        # the client fetching it, on the local socket too, with the key pinned from the command line
        pinned = self.svc.cli("key", "--public")
        self.assertEqual(pinned, self.key)
        n = len(harness.SENT)
        v = self.c.verify_run(self.r, trusted_keys=[pinned], fetch=True)
        self.assertIn("the stdout received: the sealed stream", v.checked)
        self.assertEqual([s[0] for s in harness.SENT[n:]], ["GET /v1/runs/{id}/bundle"])
        d = self.c.fetch_run(self.r.run, self.tmp)
        self.assertEqual(d, os.path.join(self.tmp, hexid))
        self.assertEqual(verify.verify_run_dir(d, [pinned], expect_run=self.r.run).run, self.r.run)
        with self.assertRaises(o.NotFoundError):
            self.c.run_bundle("b3:" + "ab" * 32)
        with self.assertRaises(o.VerificationError) as cm:  # not a run id: nothing sent
            self.c.verify_run("b3:../../etc", fetch=True)
        self.assertEqual(cm.exception.code, "invalid")

    def test_a_tampered_bundle_is_refused(self):
        hexid = self.r.run[3:]
        es = self.bundle()
        good = {m.name.rsplit("/", 1)[1]: (m, d) for m, d in es}

        def changed(name, data):
            return [(m, data if m.name.endswith("/" + name) else d) for m, d in es]
        other = "runs/%s/stdout.log" % ("cd" * 32)
        cases = [
            # (what, the bundle, the refusal)
            ("a changed file", self.tar(changed("stdout.log", good["stdout.log"][1].replace(b"sealed", b"SEALED"))),
             "address"),
            # The last byte flipped (set to 0 it would be unchanged where it was 0 already).
            ("a changed receipt", self.tar(changed("receipt.cose", good["receipt.cose"][1][:-1] + bytes([good["receipt.cose"][1][-1] ^ 1]))),
             "address"),
            ("an extra file", self.tar(es + [(self.entry("runs/%s/extra.txt" % hexid), b"stray")]), "unrecognised"),
            ("a file left out", self.tar([e for e in es if not e[0].name.endswith("/stderr.log")]), "missing"),
            ("a name that climbs", self.tar(es + [(self.entry("runs/%s/../../../climbed.txt" % hexid), b"x")]),
             "malformed"),
            ("a name that climbs first", self.tar([(self.entry("../climbed.txt"), b"x")] + es), "malformed"),
            ("an absolute name", self.tar([(self.entry("/tmp/climbed.txt"), b"x")] + es), "malformed"),
            ("a deeper name", self.tar(es + [(self.entry("runs/%s/sub/x.json" % hexid), b"{}")]), "malformed"),
            ("a symlink", self.tar([e for e in es if not e[0].name.endswith("/stdout.log")] +
                                   [(self.entry("runs/%s/stdout.log" % hexid, tarfile.SYMTYPE, "/etc/passwd"), b"")]),
             "malformed"),
            ("a hard link", self.tar(es + [(self.entry("runs/%s/other.log" % hexid, tarfile.LNKTYPE,
                                                       "runs/%s/stdout.log" % hexid), b"")]), "malformed"),
            ("a directory", self.tar([(self.entry("runs/%s" % hexid, tarfile.DIRTYPE), b"")] + es), "malformed"),
            ("a fifo", self.tar(es + [(self.entry("runs/%s/pipe.log" % hexid, tarfile.FIFOTYPE), b"")]), "malformed"),
            ("another run's file", self.tar(es + [(self.entry(other), b"x")]), "malformed"),
            ("a file twice", self.tar(es + [(self.entry("runs/%s/stdout.log" % hexid), b"second\n")]), "malformed"),
            ("a cut tar", self.tar(es)[:1500], "malformed"),
            ("a compressed tar", gzip.compress(self.tar(es)), "malformed"),
            ("nothing", b"", "malformed"),
            ("an empty tar", self.tar([]), "missing"),
        ]
        parent = os.path.dirname(self.tmp)
        for what, b, code in cases:
            with self.subTest(what):
                with self.assertRaises(o.VerificationError) as cm:
                    verify.verify_run_bundle(b, [self.key], self.r.run)
                self.assertEqual(cm.exception.code, code, cm.exception)
                with self.assertRaises(o.VerificationError):  # unpacked where it was asked: nothing left
                    d = verify.unpack_run_bundle(b, self.r.run, self.tmp)
                    verify.verify_run_dir(d, [self.key], expect_run=self.r.run)
                shutil.rmtree(os.path.join(self.tmp, hexid), ignore_errors=True)
                self.assertEqual(os.listdir(self.tmp), [])
                self.assertFalse(os.path.exists(os.path.join(parent, "climbed.txt")))
        with self.assertRaises(o.VerificationError) as cm:  # the bounds
            verify.verify_run_bundle(self.tar(es), [self.key], self.r.run, max_file=8)
        self.assertEqual(cm.exception.code, "malformed")
        with self.assertRaises(o.VerificationError) as cm:
            verify.verify_run_bundle(self.tar(es), [self.key], self.r.run, max_entries=2)
        self.assertEqual(cm.exception.code, "malformed")
        with self.assertRaises(o.ProtocolError):
            self.c.run_bundle(self.r.run, max_bytes=100)


if __name__ == "__main__":
    unittest.main()
