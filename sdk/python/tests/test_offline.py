"""What needs no service: where the client looks for one, how error bodies
become typed errors, the API's objects, and a service that is not there."""

import os
import tempfile
import unittest
from unittest import mock

from tests import harness  # noqa: F401
import opensandbox as o
from opensandbox import errors


class AddressTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(o.Address.parse("/run/x.sock").path, "/run/x.sock")
        self.assertEqual(o.Address.parse("unix:/run/x.sock").kind, "unix")
        a = o.Address.parse("https://example.org:8443")
        self.assertEqual((a.kind, a.scheme, a.host, a.port), ("tcp", "https", "example.org", 8443))
        self.assertEqual(str(o.Address.parse("https://[::1]:9")), "https://[::1]:9")
        for bad in ("ftp://x:1", "https://", "relative.sock", "https://h:1/path"):
            with self.assertRaises(ValueError, msg=bad):
                o.Address.parse(bad)

    def test_resolution_order(self):
        env = {"SANDBOX_HOST": "https://h:1", "SANDBOX_TOKEN": "t" * 20, "SANDBOX_HOME": "/s", "HOME": "/h"}
        a, tok = o.resolve(env=env)
        self.assertEqual((str(a), tok), ("https://h:1", "t" * 20))
        a, tok = o.resolve("unix:/other.sock", env=env)
        self.assertEqual((str(a), tok), ("unix:/other.sock", None))  # the token goes with TCP only
        a, _ = o.resolve(env={"SANDBOX_HOME": "/s", "HOME": "/h"})
        self.assertEqual(a.path, "/s/serve.sock")
        a, _ = o.resolve(env={"XDG_STATE_HOME": "/x", "HOME": "/h"})
        self.assertEqual(a.path, "/x/sandbox/serve.sock")
        a, _ = o.resolve(env={"XDG_STATE_HOME": "relative", "HOME": "/h"})
        self.assertEqual(a.path, "/h/.local/state/sandbox/serve.sock")

    def test_no_service(self):
        d = tempfile.mkdtemp()
        try:
            with mock.patch.dict(os.environ, {"SANDBOX_HOME": d}, clear=False):
                os.environ.pop("SANDBOX_HOST", None)
                c = o.Client()
            with self.assertRaises(o.ServiceUnreachable) as cm:
                c.health()
            self.assertIn(d, str(cm.exception))
        finally:
            os.rmdir(d)


class ErrorTest(unittest.TestCase):
    def test_categories(self):
        cases = [
            (400, "invalid", o.InvalidError), (403, "denied", o.DeniedError), (404, "not-found", o.NotFoundError),
            (429, "limit", o.LimitError), (422, "integrity", o.IntegrityError), (503, "unavailable", o.UnavailableError),
            (500, "internal", o.InternalError), (499, "canceled", o.CanceledError), (403, "untrusted", o.UntrustedError),
        ]
        for status, cat, cls in cases:
            e = errors.error_from_body(status, {"category": cat, "message": "m", "code": "over-ceiling"})
            self.assertIs(type(e), cls)
            self.assertEqual((e.status, e.category, e.message, e.code), (status, cat, "m", "over-ceiling"))
            self.assertIsInstance(e, o.APIError)
            self.assertIsInstance(e, o.SandboxError)
        e = errors.error_from_body(401, {"category": "denied", "message": "token"})
        self.assertIs(type(e), o.UnauthorizedError)
        e = errors.error_from_body(502, None, b"<html>bad gateway</html>")
        self.assertIs(type(e), o.InternalError)
        self.assertIn("bad gateway", e.message)
        e = errors.error_from_body(200, {"category": "limit", "message": "x"}, in_stream=True)
        self.assertEqual((type(e), e.status, e.in_stream), (o.LimitError, 429, True))
        e = errors.error_from_body(400, {"category": "invalid", "message": "nope", "exit_status": 127})
        self.assertEqual(e.exit_status, 127)


class TypesTest(unittest.TestCase):
    def test_result(self):
        r = o.Result.from_dict({"schema": 1, "run": "b3:x", "sealed": True, "outcome": {"status": "exited", "exit_code": 0},
                                "exit_status": 0, "exit_status_from": "guest", "new_field": 1,
                                "energy": [{"class": "Cpu", "measured_uj": 1, "estimated_uj": 2, "provenance": ["x"]}]})
        self.assertTrue(r.ok)
        self.assertEqual(r.energy_uj, 3)
        self.assertEqual(r.raw["new_field"], 1)
        self.assertEqual(o.parse_time("2026-12-05T07:10:44.535566059Z").microsecond, 535566)


if __name__ == "__main__":
    unittest.main()
