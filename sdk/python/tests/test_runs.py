"""One-shot sealed runs through a real service, and their offline
verification: a run verifies with the service's published key, and a
tampered attestation, receipt or output is refused."""

import json
import os
import shutil
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

    def test_remote_verification_says_it_cannot(self):
        if not self.svc.https:
            self.skipTest("openssl is not installed: no TLS service")
        with self.svc.tcp_client() as tc:
            with self.assertRaises(o.VerificationError) as cm:
                tc.verify_run(self.r.run)
        self.assertEqual(cm.exception.code, "unavailable")


if __name__ == "__main__":
    unittest.main()
