"""The crypto pieces against official vectors, and the offline verifier
against the project's conformance pack (conformance/v1): no service."""

import json
import os
import shutil
import tempfile
import unittest

from tests import harness  # noqa: F401  (puts src on the path)
from opensandbox import crypto, verify
from opensandbox.errors import VerificationError

VECTORS = os.path.join(harness.REPO, "testdata", "vectors")
PACK = os.path.join(harness.REPO, "conformance", "v1")


class TestPrimitives(unittest.TestCase):
    def test_self_check_against_official_vectors(self):
        done = crypto.self_check()
        text = "\n".join(done)
        self.assertIn("35 official test vectors", text)  # BLAKE3, whole 131-byte outputs
        self.assertIn("6 cyberphone vectors", text)       # JCS
        self.assertIn("eddsa-sig-01", text)                # COSE WG
        self.assertIn("RFC 8032", text)

    def test_self_check_fails_on_a_spoilt_vector(self):
        with open(os.path.join(VECTORS, "blake3", "test_vectors.json")) as f:
            tv = json.load(f)
        h = tv["cases"][20]["hash"]
        tv["cases"][20]["hash"] = h[:100] + ("0" if h[100] != "0" else "1") + h[101:]  # in the XOF tail
        d = tempfile.mkdtemp()
        try:
            p = os.path.join(d, "v.json")
            with open(p, "w") as f:
                json.dump(tv, f)
            with self.assertRaises(AssertionError):
                crypto.self_check(blake3_vectors=p)
        finally:
            shutil.rmtree(d)

    def test_blake3_multi_chunk_and_xof(self):
        with open(os.path.join(VECTORS, "blake3", "test_vectors.json")) as f:
            case = [c for c in json.load(f)["cases"] if c["input_len"] == 2049][0]
        data = bytes(i % 251 for i in range(2049))
        self.assertEqual(crypto.blake3(data).hex(), case["hash"][:64])
        self.assertEqual(crypto.blake3(data, 131).hex(), case["hash"])
        self.assertEqual(crypto.address(b"abc"),
                         "b3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85")

    def test_ed25519_refusals(self):
        pub, msg, sig = (bytes.fromhex(x) for x in crypto.RFC8032_TESTS[1])
        crypto.ed25519_verify(pub, msg, sig)
        for bad, code in ((sig[:63], "signature"), (sig[:-1] + bytes([sig[-1] ^ 0x10]), "signature")):
            with self.assertRaises(crypto.Refusal) as cm:
                crypto.ed25519_verify(pub, msg, bad)
            self.assertEqual(cm.exception.code, code)
        with self.assertRaises(crypto.Refusal) as cm:
            crypto.parse_key("ed25519:" + "01" + "00" * 31)
        self.assertEqual(cm.exception.code, "weak-key")

    def test_jcs_and_canonical_json(self):
        self.assertEqual(crypto.jcs({"b": [1, 2.5, 1e30, None], "a": "\u20ac\n"}),
                         '{"a":"\u20ac\\n","b":[1,2.5,1e+30,null]}')
        for raw, code in ((b'{"a":1,"a":2}', "duplicate-key"), (b'{"a":1.5}', "float"), (b'{"b":1,"a":2}', "non-canonical"),
                          (b'{"a":9007199254740992}', "int-range"), (b'{"a":01}', "malformed"), (b'{"a":', "truncated")):
            with self.assertRaises(crypto.Refusal, msg=raw) as cm:
                crypto.parse_canonical_json(raw)
            self.assertEqual(cm.exception.code, code, raw)


def pack_entries(kinds):
    with open(os.path.join(PACK, "manifest.json")) as f:
        m = json.load(f)
    return m["trusted_key"], [e for e in m["entries"] if e["kind"] in kinds]


class TestConformancePack(unittest.TestCase):
    """Every attestation, receipt and run vector of the pack ends as the pack
    says: ok, or refused with its code."""

    def check(self, kind, fn):
        key, entries = pack_entries({kind})
        self.assertTrue(entries)
        for e in entries:
            path = os.path.join(PACK, e["path"])
            with self.subTest(e["name"]):
                try:
                    fn(path, [key])
                    got = "ok"
                except VerificationError as err:
                    got = err.code
                self.assertEqual(got, e["expect"], "%s: %s" % (e["name"], e["about"]))
        return len(entries)

    def test_attestations(self):
        def f(path, keys):
            with open(path, "rb") as fh:
                verify.verify_attestation(fh.read(), keys)
        self.assertGreaterEqual(self.check("attestation", f), 19)

    def test_receipts(self):
        def f(path, keys):
            with open(path, "rb") as fh:
                verify.open_receipt(fh.read(), keys)
        self.assertGreaterEqual(self.check("receipt", f), 20)

    def test_run_directories(self):
        n = self.check("run", lambda path, keys: verify.verify_run_dir(path, keys))
        self.assertGreaterEqual(n, 20)

    def test_the_positive_run_and_what_was_received(self):
        key, _ = pack_entries(set())
        run = os.path.join(PACK, "positive", "run")
        v = verify.verify_run_dir(run, [key], stdout=b"hello, world\n", stderr=b"")
        self.assertEqual(v.claim["outcome"]["status"], "exited")
        with self.assertRaises(VerificationError) as cm:
            verify.verify_run_dir(run, [key], stdout=b"hello, world!\n")
        self.assertEqual(cm.exception.code, "address")
        with self.assertRaises(VerificationError) as cm:
            verify.verify_run_dir(run, [harness.other_key()])
        self.assertEqual(cm.exception.code, "untrusted-key")
        with self.assertRaises(VerificationError) as cm:
            verify.verify_run_dir(run, [key], expect_run="b3:" + "11" * 32)
        self.assertEqual(cm.exception.code, "address")


if __name__ == "__main__":
    unittest.main()
