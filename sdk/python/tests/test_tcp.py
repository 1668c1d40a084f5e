"""The service over TCP with TLS and bearer tokens (a self-signed
certificate made with openssl by the harness): calls work with a token and
the CA, a token sees only its own sandboxes, a wrong or missing token is
refused with the typed error, an unknown CA fails the handshake."""

import io
import os
import shutil
import unittest
from unittest import mock

from tests import harness
import opensandbox as o


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed, so no certificate can be made for the "
                     "TLS service (Python's ssl module cannot make one)")
class TCPTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = harness.service()
        cls.a = cls.svc.tcp_client(harness.TOKEN_A)
        cls.b = cls.svc.tcp_client(harness.TOKEN_B)

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()

    def test_calls_over_tls_with_a_token(self):
        self.assertEqual(self.a.address.kind, "tcp")
        self.assertTrue(self.a.health().ok)
        with self.a.create() as sb:
            r = sb.exec(["sh", "-c", "cat; echo; echo e >&2; exit 4"], stdin=io.BytesIO(b"z" * 200000))
            self.assertEqual(r.exit_code, 4)
            self.assertEqual(len(r.stdout), 200001)
            self.assertEqual(r.stderr, b"e\n")
            sb.write_file("t.bin", b"\x00\xff" * 50000)
            self.assertEqual(sb.read_file("t.bin"), b"\x00\xff" * 50000)
            with self.assertRaises(o.ExecTimeout) as cm:
                sb.exec(["sleep", "60"], timeout=1)
            self.assertEqual(cm.exception.result.outcome.status, "killed")
            self.assertTrue(self.a.run_report(r.run).verified)
        r = self.a.run(["/bin/echo", "over tls"])
        self.assertEqual(r.stdout, b"over tls\n")

    def test_a_token_sees_only_its_own(self):
        with self.a.create() as sb:
            self.assertIn(sb.id, [s.id for s in self.a.list_sandboxes()])
            self.assertNotIn(sb.id, [s.id for s in self.b.list_sandboxes()])
            with self.assertRaises(o.NotFoundError):
                self.b.get_sandbox(sb.id)
            with self.assertRaises(o.NotFoundError):
                self.b.exec(sb.id, ["true"])
            with self.assertRaises(o.NotFoundError):
                self.b.remove_sandbox(sb.id)
        # a token may not grant a host directory (the Default policy)
        with self.assertRaises(o.DeniedError) as cm:
            self.a.create(grants=["fs:/etc:ro"])
        self.assertEqual(cm.exception.status, 403)
        self.assertNotIsInstance(cm.exception, o.UnauthorizedError)
        with self.assertRaises(o.DeniedError):  # nor read the operator's whole ledger
            self.a.jcp_ledger()

    def test_wrong_or_missing_token_is_refused(self):
        for tok in ("wrong-token-" + "w" * 20, ""):
            with self.subTest(token=tok):
                with mock.patch.dict(os.environ, {"SANDBOX_TOKEN": ""}):
                    c = o.Client(self.svc.https, token=tok or None, ca_file=self.svc.cert)
                for call in (c.health, lambda: c.create(), lambda: c.exec("sb-x", ["true"])):
                    with self.assertRaises(o.UnauthorizedError) as cm:
                        call()
                    e = cm.exception
                    self.assertEqual(e.status, 401)
                    self.assertEqual(e.category, "denied")
                    self.assertIsInstance(e, o.DeniedError)
                    self.assertIn("bearer token", e.message)
                c.close()

    def test_unknown_ca_fails_the_handshake(self):
        c = o.Client(self.svc.https, token=harness.TOKEN_A)  # the system's CAs: not our self-signed cert
        with self.assertRaises(o.ServiceUnreachable) as cm:
            c.health()
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))

    def test_address_and_token_from_the_environment(self):
        env = {"SANDBOX_HOST": self.svc.https, "SANDBOX_TOKEN": harness.TOKEN_B, "SANDBOX_HOME": "/nonexistent"}
        with mock.patch.dict(os.environ, env):
            c = o.Client(ca_file=self.svc.cert)
        self.assertEqual(str(c.address), self.svc.https)
        self.assertTrue(c.health().ok)
        c.close()


if __name__ == "__main__":
    unittest.main()
