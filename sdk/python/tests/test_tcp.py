"""The service over TCP with TLS and bearer tokens (a self-signed
certificate made with openssl by the harness): calls work with a token and
the CA, a token sees only its own sandboxes, a wrong or missing token is
refused with the typed error, an unknown CA fails the handshake, and a run
is verified remotely from its bundle under a pinned key (or, asked for,
the key the service publishes), a bundle tampered with on the way refused."""

import io
import os
import shutil
import tarfile
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

    def test_a_suspended_sandbox_by_its_id(self):
        sb = self.a.create()
        try:
            sb.suspend()
            info = self.a.get_sandbox(sb.id)
            self.assertEqual(info.state, "suspended")
            self.assertIsInstance(info.grants, list)
            self.assertEqual(self.a.sandbox(sb.id).info.state, "suspended")
            with self.assertRaises(o.NotFoundError):  # another token's: as if it were not there
                self.b.get_sandbox(sb.id)
        finally:
            self.a.remove_sandbox(sb.id)
        with self.assertRaises(o.NotFoundError):
            self.a.get_sandbox(sb.id)

    def test_remote_verification(self):
        pinned = self.svc.cli("key", "--public")  # out of band: on the service's host
        self.assertEqual(self.a.host_key(), pinned)
        # a token sees the runs its sandboxes' records cite: while the sandbox is there
        sb = self.a.create()
        self.addCleanup(self.a.remove_sandbox, sb.id)
        r = sb.exec(["sh", "-c", "echo far away; echo and to stderr >&2"])
        n = len(harness.SENT)
        v = self.a.verify_run(r, trusted_keys=[pinned])
        self.assertEqual((v.run, v.signer, v.type), (r.run, pinned, "sandbox.attestation/2"))
        self.assertIn("the stdout received: the sealed stream", v.checked)
        self.assertIn("the stderr received: the sealed stream", v.checked)
        self.assertEqual([x[0] for x in harness.SENT[n:]], ["GET /v1/runs/{id}/bundle"],
                         "fetched from the service, not read from this host's disk")
        # the key the service publishes, asked for explicitly
        n = len(harness.SENT)
        self.assertEqual(self.a.verify_run(r.run, trust_service_key=True).signer, pinned)
        self.assertEqual(sorted(x[0] for x in harness.SENT[n:]), ["GET /v1/key", "GET /v1/runs/{id}/bundle"])
        # no key: refused before anything is fetched; another key: untrusted
        n = len(harness.SENT)
        with self.assertRaises(o.VerificationError) as cm:
            self.a.verify_run(r)
        self.assertEqual(cm.exception.code, "untrusted-key")
        self.assertIn("trust_service_key", str(cm.exception))
        self.assertEqual(harness.SENT[n:], [])
        with self.assertRaises(o.VerificationError) as cm:
            self.a.verify_run(r, trusted_keys=harness.other_key())
        self.assertEqual(cm.exception.code, "untrusted-key")
        with self.assertRaises(o.VerificationError) as cm:
            self.a.verify_run(r, trusted_keys=[pinned], fetch=False)
        self.assertEqual(cm.exception.code, "unavailable")
        # the received output is checked against the sealed streams
        with self.assertRaises(o.VerificationError) as cm:
            self.a.verify_run(r.run, trusted_keys=[pinned], stdout=b"not what it wrote\n")
        self.assertEqual(cm.exception.code, "address")
        # another token may not see the run at all
        with self.assertRaises(o.NotFoundError):
            self.b.verify_run(r.run, trusted_keys=[pinned])

    def test_a_bundle_tampered_on_the_way_is_refused(self):
        pinned = self.svc.cli("key", "--public")
        sb = self.a.create()
        self.addCleanup(self.a.remove_sandbox, sb.id)
        r = sb.exec(["echo", "tamper with me"])
        raw = self.a.run_bundle(r.run)
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
            es = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]

        def tar(entries):
            out = io.BytesIO()
            with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for m, data in entries:
                    m.size = len(data) if m.isreg() else 0
                    tf.addfile(m, io.BytesIO(data) if m.size else None)
            return out.getvalue()
        link = tarfile.TarInfo("runs/%s/stdout.log" % r.run[3:])
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        climb = tarfile.TarInfo("runs/%s/../../climbed.txt" % r.run[3:])
        cases = [
            ("a changed file", tar([(m, d.replace(b"tamper", b"TAMPER")) for m, d in es]), "address"),
            ("an extra file", tar(es + [(tarfile.TarInfo("runs/%s/extra.txt" % r.run[3:]), b"x")]), "unrecognised"),
            ("a name that climbs", tar([(climb, b"x")] + es), "malformed"),
            ("a symlink", tar([e for e in es if not e[0].name.endswith("/stdout.log")] + [(link, b"")]), "malformed"),
        ]
        for what, b, code in cases:
            with self.subTest(what):
                def serve(run_id, dest=None, **kw):
                    dest.write(b)
                    return len(b)
                with mock.patch.object(self.a, "run_bundle", side_effect=serve):
                    with self.assertRaises(o.VerificationError) as cm:
                        self.a.verify_run(r, trusted_keys=[pinned])
                self.assertEqual(cm.exception.code, code, cm.exception)
        self.assertEqual(self.a.verify_run(r, trusted_keys=[pinned]).run, r.run)  # the real one still does

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
