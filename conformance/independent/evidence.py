#!/usr/bin/env python3
"""An independent verifier of the evidence binding of sandbox.attestation/4
claims, written from docs/spec/attestation.md ("The evidence binding") and
docs/spec/evidence.md (§1 the kinds, §7 the software evidence format,
§ Vectors) alone: Python's standard library, and the Ed25519 (RFC 8032,
strict), RFC 8785 check and BLAKE3 of the sibling verifiers jcp.py and
runrecord.py, which check themselves before anything else. None of this
project's code.

What it checks, for a claim and the evidence it cites:

  1. the claim is RFC 8785 canonical JSON, typed sandbox.attestation/4,
     with an `evidence` member; the evidence's BLAKE3 is `evidence.report`;
  2. binding = SHA-512("sandbox.evidence-binding/1\\n" || JCS(claim
     without `evidence`));
  3. the evidence's kind, from its first bytes (evidence.md §1); over 1 MiB
     is evidence-too-large, an unknown header evidence-unsupported;
  4. software (sandbox.software-evidence/1): refused (evidence-software)
     unless allowed; exactly 224 bytes and its time at most 2^62
     (evidence-malformed); its Ed25519 signature over
     "sandbox.software-evidence/1" || 0x00 || bytes 0-159 under the key at
     128-159 (evidence-signature);
     SEV-SNP and TDX: the report's size and version only. NOT the vendor
     chain, the certificates' validity or the report's signature: they are
     ECDSA (P-384, P-256) over X.509, and Python's standard library has
     neither. A case that expects a code only those checks give
     (evidence-cert, -chain, -expired, -signature, -binding) is reported
     "not checked here", neither agreeing nor disagreeing; for the others,
     this verifier assumes the chain and signature hold, as the case says;
  5. report_data (software: bytes 8-71; SEV-SNP: REPORT_DATA at 0x50-0x8F;
     TDX v4: the TD quote body's REPORTDATA, 48 + 520 = 568-631) equals
     the binding (evidence-report-data);
  6. the kind is the one the claim says, and `software` is true exactly
     for software (invalid).

usage: evidence.py --vectors FILE.json
       evidence.py --claim CLAIM.json --evidence evidence.bin [--allow-software]

--vectors runs every case of a `sandbox.evidence-vectors/1` file
(conformance/v1/evidence/evidence.json), one line each, checks the
binding the case states and the report_data it says the evidence carries
too, and prints "N cases, D disagreements, S not
checked here"; it exits 1 if any disagrees. --claim checks one claim (its
canonical JSON text, as in attestation.json's `claim` member) and the
evidence it cites.
"""
import base64
import hashlib
import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jcp  # noqa: E402  (its Ed25519, JCS check and BLAKE3 only)

Reject = jcp.Reject

# attestation.md, "The evidence binding".
CLAIM_TYPE = "sandbox.attestation/4"
BINDING_DOMAIN = b"sandbox.evidence-binding/1\n"
# evidence.md §1.
MAX_EVIDENCE = 1 << 20
# evidence.md §7.
SOFTWARE_MAGIC = b"SBXSOFT1"
SOFTWARE_SIZE = 224
SOFTWARE_DOMAIN = b"sandbox.software-evidence/1\x00"
# evidence.md § Vectors: where the hardware reports carry report_data.
SNP_REPORT_SIZE = 0x4A0
SNP_REPORT_DATA = 0x50
SNP_POLICY = 0x08
SNP_POLICY_DEBUG = 1 << 19
TDX_HEADER = 48
TDX_BODY = 584
TDX_REPORT_DATA = TDX_HEADER + 520
TDX_TD_ATTRIBUTES = TDX_HEADER + 120

# The codes only the vendor chain and signature give: not checked here.
HARDWARE_ONLY = {"evidence-cert", "evidence-chain", "evidence-expired", "evidence-signature", "evidence-binding"}
NOT_CHECKED = "vendor chain, certificate validity and report signature not checked here (ECDSA and X.509 are not in Python's standard library)"


class NotChecked(Exception):
    """What this verifier does not check decides the case."""


def parse_claim(raw):
    """Step 1: canonical JSON, /4, an evidence object of the table's form."""
    c = jcp.parse_canonical_json(raw, "claim")
    if not isinstance(c, dict):
        raise Reject("invalid", "claim", "not an object")
    if c.get("type") != CLAIM_TYPE:
        raise Reject("unrecognised", "claim.type", repr(c.get("type")))
    e = c.get("evidence")
    if not isinstance(e, dict):
        raise Reject("missing-field", "claim.evidence", "a /4 claim cites its evidence")
    for m in ("provider", "kind", "report"):
        if not isinstance(e.get(m), str) or not e[m]:
            raise Reject("missing-field", "claim.evidence." + m, "absent")
    if "software" in e and e["software"] is not True:
        raise Reject("non-canonical", "claim.evidence.software", "present only as true")
    return c


def binding(c):
    """Step 2: the claim exactly as signed, without its evidence member."""
    rest = {k: v for k, v in c.items() if k != "evidence"}
    return hashlib.sha512(BINDING_DOMAIN + jcp.jcs(rest).encode("utf-8")).digest()


def detect(b):
    """Step 3 (evidence.md §1): the kind from the first bytes."""
    if b[:8] == SOFTWARE_MAGIC:
        return "software"
    if len(b) >= 8:
        version, key_type, tee = struct.unpack_from("<HHI", b, 0)
        if version in (4, 5) and key_type == 2 and tee == 0x81:
            return "tdx"
    if len(b) >= 0x38:
        version = struct.unpack_from("<I", b, 0)[0]
        algo = struct.unpack_from("<I", b, 0x34)[0]
        if 2 <= version <= 5 and algo == 1:
            return "sev-snp"
    raise Reject("evidence-unsupported", "evidence at offset 0", "no SEV-SNP, TDX or software header")


def read_report_data(ev, kind):
    """Step 5's 64 bytes, where each kind carries them."""
    off = {"software": 8, "sev-snp": SNP_REPORT_DATA, "tdx": TDX_REPORT_DATA}[kind]
    return ev[off:off + 64]


def verify(raw_claim, ev, allow_software):
    """Steps 1-6. Returns (the binding, a note); raises Reject, or
    NotChecked where the vendor's chain or signature would decide."""
    c = parse_claim(raw_claim)
    want = binding(c)
    cited = c["evidence"]
    if cited["report"] != "b3:" + jcp.blake3(ev).hex():
        raise Reject("address", "evidence", "its BLAKE3 is not the claim's evidence.report")
    if len(ev) > MAX_EVIDENCE:
        raise Reject("evidence-too-large", "evidence", "%d bytes" % len(ev))
    kind = detect(ev)
    note = ""
    if kind == "software":
        if not allow_software:
            raise Reject("evidence-software", "software", "software-grounded evidence, not allowed")
        if len(ev) != SOFTWARE_SIZE:
            raise Reject("evidence-malformed", "software", "%d bytes, not %d" % (len(ev), SOFTWARE_SIZE))
        if struct.unpack_from(">Q", ev, 120)[0] > 1 << 62:
            raise Reject("evidence-malformed", "software.time at offset 120", "out of range")
        try:
            jcp.check_signature(ev[128:160], SOFTWARE_DOMAIN + ev[:160], ev[160:224], "software.signature")
        except Reject as e:
            raise Reject("evidence-signature", "software.signature", e.detail)
        report_data = read_report_data(ev, kind)
        note = "SOFTWARE-GROUNDED, key %s" % ev[128:160].hex()
    elif kind == "sev-snp":
        if len(ev) < SNP_REPORT_SIZE:
            raise Reject("evidence-malformed", "sev-snp", "%d bytes, a report is %d" % (len(ev), SNP_REPORT_SIZE))
        report_data = read_report_data(ev, kind)
        if struct.unpack_from("<Q", ev, SNP_POLICY)[0] & SNP_POLICY_DEBUG:
            note = "a DEBUG guest; "
        note += NOT_CHECKED
    else:
        if struct.unpack_from("<H", ev, 0)[0] != 4:
            raise Reject("evidence-unsupported", "tdx", "a quote of version 5")
        if len(ev) < TDX_HEADER + TDX_BODY:
            raise Reject("evidence-malformed", "tdx", "%d bytes: shorter than a header and a TD quote body" % len(ev))
        report_data = read_report_data(ev, kind)
        if struct.unpack_from("<Q", ev, TDX_TD_ATTRIBUTES)[0] & 1:
            note = "a DEBUG TD; "
        note += NOT_CHECKED
    if report_data != want:
        raise Reject("evidence-report-data", kind + ".report_data", "%s..., the binding is %s..." % (report_data[:8].hex(), want[:8].hex()))
    if cited["kind"] != kind or ("software" in cited) != (kind == "software"):
        raise Reject("invalid", "claim.evidence.kind", "the claim says %s, the evidence is %s" % (cited["kind"], kind))
    return want, note


def run_vectors(path):
    import json
    with open(path, "rb") as f:
        v = json.loads(f.read())
    if v.get("type") != "sandbox.evidence-vectors/1":
        sys.exit("%s: not a sandbox.evidence-vectors/1 file" % path)
    bad = skipped = 0
    for c in v["cases"]:
        ev = base64.b64decode(c["evidence"], validate=True)
        claim = c["claim"].encode("utf-8")
        # The case's own binding, which a verifier of this text computes too.
        try:
            mine = binding(parse_claim(claim)).hex()
        except Reject as e:
            mine = str(e)
        note, where = "", ""
        try:
            _, note = verify(claim, ev, c["allow_software"])
            got = "ok"
        except Reject as e:
            got, where = e.code, e.where
            if ev[:8] != SOFTWARE_MAGIC and got == "evidence-report-data":
                note = NOT_CHECKED
        hardware = ev[:8] != SOFTWARE_MAGIC and got in ("ok", "evidence-report-data", "invalid")
        # The report_data the case says the evidence carries, where it
        # verifies but for its binding: this verifier's reading must find it.
        try:
            theirs = read_report_data(ev, detect(ev)).hex()
        except Reject:
            theirs = ""
        if "report_data" in c and theirs != c["report_data"]:
            bad += 1
            print("DIFF  %-42s report_data %s, the case says %s" % (c["name"], theirs, c["report_data"]))
        elif mine != c["binding"]:
            bad += 1
            print("DIFF  %-42s binding %s, the case says %s" % (c["name"], mine, c["binding"]))
        elif c["expect"] in HARDWARE_ONLY and hardware:
            skipped += 1
            print("skip  %-42s expects %s: %s" % (c["name"], c["expect"], NOT_CHECKED))
        elif got != c["expect"]:
            bad += 1
            print("DIFF  %-42s %-24s %s (want %s)" % (c["name"], got, where, c["expect"]))
        else:
            print("ok    %-42s %-24s %s%s" % (c["name"], got, where, ("  [%s]" % note) if note else ""))
    print("%d cases, %d disagreements, %d not checked here (hardware chain or signature)" % (len(v["cases"]), bad, skipped))
    return 1 if bad else 0


def main(argv):
    jcp.self_check()
    if len(argv) == 2 and argv[0] == "--vectors":
        return run_vectors(argv[1])
    if len(argv) in (4, 5) and argv[0] == "--claim" and argv[2] == "--evidence" and argv[4:] in ([], ["--allow-software"]):
        with open(argv[1], "rb") as f:
            raw = f.read().rstrip(b"\n")
        with open(argv[3], "rb") as f:
            ev = f.read()
        try:
            b, note = verify(raw, ev, argv[4:] == ["--allow-software"])
        except Reject as e:
            print(e)
            return 1
        print("ok, bound: binding %s%s" % (b.hex(), ("; " + note) if note else ""))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
