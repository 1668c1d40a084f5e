"""Offline verification of sealed runs, from the specification
(docs/spec/attestation.md, receipt.md, run-directory.md, journal.md,
canonical.md, keys.md), with the pure-Python primitives of
:mod:`opensandbox.crypto`. Nothing here asks the service anything: a run
verifies, or is refused with the specification's refusal code, from its
bytes and the keys the caller trusts.

What is checked, in run-directory.md's order, the first failure reported:

1. ``attestation.json``: canonical JSON, exactly ``claim`` and
   ``signature``, the claim valid for its type (``/1`` to ``/4``),
   the signature unpadded base64url, the signer not a weak key, the
   Ed25519 signature over JCS(claim) (64 bytes, ``S < L``), the signer
   trusted; its address BLAKE3(JCS(claim)) is the run id;
2. ``unit.json``, 3. ``grants.json``, 4. ``decisions.json``: present, hashing
   to the claim's addresses, canonical; the unit binds the claim's grants
   and image;
5. ``receipt.cose``: hashing to the claim's address, then receipt.md's
   steps 1-16 (COSE_Sign1, deterministic CBOR, header, payload types,
   kid, weak key, signature, validity and totals, trust), for the claim's
   unit and signed by its signer;
6. ``jcp-decision.cose`` where the claim cites one: its address, its
   COSE signature by the attestation's signer, an allowing decision for
   the claim's image and chosen tier;
7. the required tier from the unit's kind and the grants, the chosen tier
   against it, every device class the unit asks for granted and
   accounted, the receipt's interval equal to the claim's;
8. ``journal.cbor``: its hash chain's root is the claim's, its outcome
   entry last and agreeing with the claim and the receipt (a native unit's
   journal holds only that entry);
9. ``stdout.log`` and ``stderr.log`` against the journal's outcome
   (``truncated``, ``extended``, ``address``); and, given them, the bytes
   the caller received, against the whole streams' BLAKE3 and length;
10. no other file (``unrecognised``).

Not checked here: the hardware evidence of an ``/4`` claim (S6/S7: X.509
and ECDSA are not in Python's standard library) and its locality claim;
such a run is reported with them in ``unchecked``.

A run fetched from a service (``GET /v1/runs/{id}/bundle``, a tar of
``runs/HEX/NAME`` entries) is read as hostile by :func:`unpack_run_bundle`
before any of this: only regular files, each named ``runs/<the run's
hex>/<name>``, the name letters (hyphens between them) and one dot, each
once, within bounds, written with ``O_EXCL | O_NOFOLLOW`` into a directory
made for it; anything else refuses the whole bundle (``malformed``).
:func:`verify_run_bundle` unpacks into a fresh temporary directory,
verifies, and removes it.
"""

import calendar
import datetime
import io
import os
import re
import shutil
import tarfile
import tempfile

from .crypto import (CBORTag, Refusal, b64url_decode, blake3, cbor_decode, cbor_decode_prefix, cbor_encode,
                     check_key, ed25519_verify, jcs, parse_canonical_json, parse_key)
from .errors import VerificationError

__all__ = ["VerifiedRun", "verify_attestation", "open_receipt", "verify_journal", "verify_run_dir",
           "unpack_run_bundle", "verify_run_bundle", "VerificationError", "MAX_BUNDLE_FILE", "MAX_BUNDLE_ENTRIES"]

CLASSES = ["Cpu", "Simd", "Gpu", "Npu", "Tpu", "Lpu", "Photonic", "Quantum"]
TIERS = ["S%d" % i for i in range(8)]
STATUSES = {"exited", "killed", "deadline", "out-of-fuel", "out-of-memory", "trapped", "failed", "budget-exhausted"}
RECEIPT_CT = "application/jcr-1+cbor"
DECISION_CT = "application/jcp-decision+cbor"

_BASE_REQ = {"type", "signer", "unit", "image", "grants", "decisions", "receipt", "tier", "executor",
             "hardware", "outcome", "started", "ended"}
_BASE_OPT = {"journal", "notes"}
CLAIM_TYPES = {
    "sandbox.attestation/1": (_BASE_REQ, _BASE_OPT),
    "sandbox.attestation/2": (_BASE_REQ, _BASE_OPT | {"record", "audit_prev"}),
    "sandbox.attestation/3": (_BASE_REQ | {"jcp"}, _BASE_OPT | {"record", "audit_prev"}),
    "sandbox.attestation/4": (_BASE_REQ | {"evidence"}, _BASE_OPT | {"record", "audit_prev", "jcp", "locality"}),
}
_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{9})Z$")


class VerifiedRun:
    """A run that verified. ``run`` is its id (``b3:…``), ``signer`` the key
    that signed it, ``claim`` the attestation's claim (a dict), ``receipt``
    the receipt's payload (a dict; byte strings as bytes), ``outcome`` the
    journal's outcome (status, exit code, each stream's BLAKE3 and length,
    fuel), ``checked`` what was checked and ``unchecked`` what could not be
    here (an ``/4`` claim's hardware evidence)."""

    def __init__(self, run, claim, receipt, outcome, checked, unchecked):
        self.run, self.claim, self.receipt, self.outcome = run, claim, receipt, outcome
        self.signer = claim["signer"]
        self.checked, self.unchecked = checked, unchecked

    @property
    def type(self):
        """The claim's type (``sandbox.attestation/1`` …)."""
        return self.claim["type"]

    @property
    def tier(self):
        """The tier the unit ran at."""
        return self.claim["tier"]["chosen"]

    @property
    def energy_uj(self):
        """The receipt's total energy, every class, measured plus estimated (µJ)."""
        return sum(d["measured_uj"] + d["estimated_uj"] for d in self.receipt["devices"])

    def __repr__(self):
        return "VerifiedRun(%s, %s, %s at %s)" % (self.run, self.claim["outcome"]["status"], self.type, self.tier)


def _fail(code, where, detail=""):
    raise VerificationError(code, where, detail)


def _time_ns(s, where):
    m = _TIME.match(s) if isinstance(s, str) else None
    if not m:
        _fail("invalid", where, "not RFC 3339 UTC with nine fraction digits: %r" % (s,))
    y, mo, d, h, mi, se, frac = m.groups()
    try:
        datetime.datetime(int(y), int(mo), int(d), int(h), int(mi), int(se))
        secs = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(se), 0, 0, 0))
    except ValueError:
        _fail("invalid", where, "not a time: %r" % s)
    return secs * 1_000_000_000 + int(frac)


def _addr(v, where, required=True):
    if not isinstance(v, str) or len(v) != 67 or not v.startswith("b3:") or \
            any(c not in "0123456789abcdef" for c in v[3:]):
        _fail("invalid", where, "not b3: and 64 lowercase hex digits")
    b = bytes.fromhex(v[3:])
    if b == bytes(32):
        _fail("missing-field" if required else "non-canonical", where, "the all-zero address names nothing")
    return b


def _members(obj, req, opt, where):
    if not isinstance(obj, dict):
        _fail("invalid", where, "not an object")
    for k in sorted(obj):
        if k not in req and k not in opt:
            _fail("unknown-field", "%s.%s" % (where, k) if where != "claim" else "claim." + k, "not a member of this type")
    for k in sorted(req):
        if k not in obj:
            _fail("missing-field", "%s.%s" % (where, k), "required")
    for k in sorted(obj):
        v = obj[k]
        if k in opt and (v is None or v == "" or v == [] or v == {} or v is False):
            _fail("non-canonical", "%s.%s" % (where, k), "an absent optional member is left out, not written %r" % (v,))
        if k in req and v is None:
            _fail("invalid", "%s.%s" % (where, k), "null is not a value of its type")


def _str(v, where, empty_ok=False):
    if not isinstance(v, str) or (not empty_ok and not v):
        _fail("invalid", where, "want a non-empty string")
    return v


def _int(v, where):
    if not isinstance(v, int) or isinstance(v, bool):
        _fail("invalid", where, "want an integer")
    return v


def _check_claim(c):
    """attestation.md's claim table and versions (step 3)."""
    if not isinstance(c, dict):
        _fail("invalid", "claim", "not an object")
    t = c.get("type")
    if t not in CLAIM_TYPES:
        _fail("unrecognised", "claim.type", "%r is not a claim type this verifier knows" % (t,))
    req, opt = CLAIM_TYPES[t]
    _members(c, req, opt, "claim")
    if t == "sandbox.attestation/2" and "record" not in c and "audit_prev" not in c:
        _fail("non-canonical", "claim.type", "a /2 claim with neither record nor audit_prev is /1")
    if not isinstance(c["signer"], str) or not re.match(r"^ed25519:[0-9a-f]{64}$", c["signer"]):
        _fail("invalid", "claim.signer", "not ed25519: and 64 lowercase hex digits")
    for k in ("unit", "image", "grants", "decisions", "receipt", "journal", "jcp", "audit_prev"):
        if k in c:
            _addr(c[k], "claim." + k, required=k in req)
    tier = c["tier"]
    _members(tier, {"required", "chosen", "reason"}, set(), "claim.tier")
    for k in ("required", "chosen"):
        if tier[k] not in TIERS:
            _fail("invalid", "claim.tier." + k, "%r is not S0…S7" % (tier[k],))
    _str(tier["reason"], "claim.tier.reason")
    _str(c["executor"], "claim.executor")
    hw = c["hardware"]
    _members(hw, {"host"}, {"devices"}, "claim.hardware")
    _members(hw["host"], {"name", "os", "arch"}, {"kernel", "cpu"}, "claim.hardware.host")
    for k, v in hw["host"].items():
        _str(v, "claim.hardware.host." + k)
    for i, d in enumerate(hw.get("devices", [])):
        w = "claim.hardware.devices[%d]" % i
        _members(d, {"class", "model", "driver"}, {"id"}, w)
        if d["class"] not in CLASSES:
            _fail("invalid", w + ".class", "%r is not a device class" % (d["class"],))
        for k in ("model", "driver", "id"):
            if k in d:
                _str(d[k], "%s.%s" % (w, k))
    o = c["outcome"]
    _members(o, {"status"}, {"exit_code", "detail"}, "claim.outcome")
    if o["status"] not in STATUSES:
        _fail("invalid", "claim.outcome.status", "%r is not an outcome status" % (o["status"],))
    if "exit_code" in o:
        _int(o["exit_code"], "claim.outcome.exit_code")
    if (o["status"] == "exited") != ("exit_code" in o):
        _fail("invalid", "claim.outcome.exit_code", "present exactly when the status is exited")
    if "detail" in o:
        _str(o["detail"], "claim.outcome.detail")
    if "notes" in c:
        if not isinstance(c["notes"], list):
            _fail("invalid", "claim.notes", "not an array")
        for i, n in enumerate(c["notes"]):
            _str(n, "claim.notes[%d]" % i)
    s, e = _time_ns(c["started"], "claim.started"), _time_ns(c["ended"], "claim.ended")
    if e < s:
        _fail("invalid", "claim.ended", "before started")
    if "record" in c:
        _members(c["record"], {"genesis", "head"}, set(), "claim.record")
        _addr(c["record"]["genesis"], "claim.record.genesis")
        _addr(c["record"]["head"], "claim.record.head")


def _trusted(keys):
    out = set()
    for k in keys or []:
        out.add(parse_key(k.strip(), "trusted key"))
    return out


def verify_attestation(data, trusted_keys, where="attestation.json"):
    """Verify an attestation envelope (attestation.md, steps 1-7) and return
    ``(claim, run_id)``. ``trusted_keys``: keys in text form
    (``ed25519:…``). Raises :class:`~opensandbox.errors.VerificationError`."""
    try:
        env = parse_canonical_json(data, where)
    except Refusal as e:
        raise VerificationError(e.code, where, e.detail) from None
    if not isinstance(env, dict):
        _fail("invalid", where, "not an object")
    _members(env, {"claim", "signature"}, set(), where)
    claim = env["claim"]
    _check_claim(claim)
    try:
        sig = b64url_decode(env["signature"], where + ": signature")
    except Refusal as e:
        raise VerificationError("malformed", where + ": signature", e.detail) from None
    pub = bytes.fromhex(claim["signer"][8:])
    msg = _jcs_bytes(claim)
    try:
        check_key(pub, where + ": claim.signer")
        ed25519_verify(pub, msg, sig, where + ": signature")
    except Refusal as e:
        raise VerificationError(e.code, e.where, e.detail) from None
    if pub not in _trusted(trusted_keys):
        _fail("untrusted-key", where, "signed by %s, which is not trusted" % claim["signer"])
    return claim, "b3:" + blake3(msg).hex()


def _jcs_bytes(v):
    return jcs(v).encode("utf-8")


# ---------------------------------------------------------------- COSE_Sign1
def _open_cose(raw, where, content_type):
    """receipt.md's steps 1-9: the envelope and its protected header.
    Returns (protected bytes, payload bytes, signature, kid)."""
    try:
        env = cbor_decode(raw, where)
    except Refusal as e:
        raise VerificationError(e.code, where, e.detail) from None
    if raw[:2] != b"\xd2\x84" or not isinstance(env, CBORTag) or env.number != 18:
        _fail("malformed", where, "not tag 18 around an array of four")
    arr = env.value
    if not (isinstance(arr[0], bytes) and isinstance(arr[1], dict) and isinstance(arr[2], bytes)
            and isinstance(arr[3], bytes)):
        _fail("malformed", where, "not [bstr, map, bstr, bstr]")
    prot_raw, unprot, payload, sig = arr
    try:
        prot = cbor_decode(prot_raw, where)
    except Refusal as e:
        raise VerificationError("header", where + ": protected", "%s: %s" % (e.code, e.detail)) from None
    if not isinstance(prot, dict) or not all(isinstance(k, int) and not isinstance(k, bool) for k in prot):
        _fail("header", where + ": protected", "not a map with integer labels")
    if 2 in prot:
        _fail("unknown-critical", where + ": protected.crit", "this profile defines no critical headers")
    for k in prot:
        if k not in (1, 3, 4):
            _fail("header", where + ": protected", "label %d" % k)
    if unprot != {}:
        _fail("header", where + ": unprotected", "not the empty map")
    alg = prot.get(1)
    if not (isinstance(alg, int) and not isinstance(alg, bool) and alg in (-8, -19)):
        _fail("alg", where + ": protected.alg", "algorithm %r" % (alg,))
    if prot.get(3) != content_type:
        _fail("header", where + ": protected.content-type", "%r, want %r" % (prot.get(3), content_type))
    kid = prot.get(4)
    if not isinstance(kid, bytes) or len(kid) != 32:
        _fail("header", where + ": protected.kid", "not a 32-byte string")
    return prot_raw, payload, sig, kid


def _check_sig(prot_raw, payload, sig, kid, pub, where):
    """Steps 11-14: kid names the signer, the signer is not weak, the
    signature verifies over the Sig_structure."""
    if kid != blake3(pub):
        _fail("header", where + ": protected.kid", "not the id of the payload's signer")
    try:
        check_key(pub, where + ": signer")
        ed25519_verify(pub, cbor_encode(["Signature1", prot_raw, b"", payload]), sig, where + ": signature")
    except Refusal as e:
        raise VerificationError(e.code, e.where, e.detail) from None


def _uint(v, where):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        _fail("invalid", where, "want an unsigned integer")
    return v


def _cbor_members(m, req, opt, where):
    if not isinstance(m, dict) or not all(isinstance(k, str) for k in m):
        _fail("invalid", where, "not a map with text keys")
    for k in sorted(m, key=lambda x: x.encode("utf-8")):
        if k not in req and k not in opt:
            _fail("unknown-field", "%s.%s" % (where, k), "not a member of this type")
    for k in sorted(req):
        if k not in m:
            _fail("missing-field", "%s.%s" % (where, k), "required")


def _receipt_types(p, where):
    """Step 10: the payload's members and their types."""
    _cbor_members(p, {"v", "signer", "unit", "start_ns", "end_ns", "devices"}, {"fuel"}, where)
    for k in ("v", "start_ns", "end_ns", "fuel"):
        if k in p:
            _uint(p[k], "%s.%s" % (where, k))
    for k in ("signer", "unit"):
        if not isinstance(p[k], bytes) or len(p[k]) != 32:
            _fail("invalid", "%s.%s" % (where, k), "want 32 bytes")
    if not isinstance(p["devices"], list):
        _fail("invalid", where + ".devices", "want an array")
    for i, d in enumerate(p["devices"]):
        w = "%s.devices[%d]" % (where, i)
        _cbor_members(d, {"class", "measured_uj", "estimated_uj", "readings"}, set(), w)
        if not isinstance(d["class"], str):
            _fail("invalid", w + ".class", "want text")
        _uint(d["measured_uj"], w + ".measured_uj")
        _uint(d["estimated_uj"], w + ".estimated_uj")
        if not isinstance(d["readings"], list):
            _fail("invalid", w + ".readings", "want an array")
        for j, r in enumerate(d["readings"]):
            rw = "%s.readings[%d]" % (w, j)
            _cbor_members(r, {"provenance", "scope", "source", "start_ns", "end_ns", "uj"}, {"basis"}, rw)
            for k in ("provenance", "scope", "source", "basis"):
                if k in r and not isinstance(r[k], str):
                    _fail("invalid", "%s.%s" % (rw, k), "want text")
            for k in ("start_ns", "end_ns", "uj"):
                _uint(r[k], "%s.%s" % (rw, k))


def _receipt_valid(p, where):
    """Step 15: the receipt's values and totals."""
    if p["v"] != 1:
        _fail("invalid", where + ".v", "version %r" % p["v"])
    if p["unit"] == bytes(32):
        _fail("missing-field", where + ".unit", "the all-zero address")
    if p["end_ns"] < p["start_ns"]:
        _fail("invalid", where + ".end_ns", "before start_ns")
    if "fuel" in p and p["fuel"] == 0:
        _fail("invalid", where + ".fuel", "a run that counted no fuel leaves it out")
    seen = []
    for i, d in enumerate(p["devices"]):
        w = "%s.devices[%d]" % (where, i)
        if d["class"] not in CLASSES:
            _fail("invalid", w + ".class", "%r is not a device class" % d["class"])
        if seen and CLASSES.index(d["class"]) <= CLASSES.index(seen[-1]):
            _fail("non-canonical", w + ".class", "device accounts out of the canonical class order, or twice")
        seen.append(d["class"])
        measured = estimated = 0
        for j, r in enumerate(d["readings"]):
            rw = "%s.readings[%d]" % (w, j)
            if r["provenance"] not in ("HwShunt", "ModelBased", "Estimator"):
                _fail("invalid", rw + ".provenance", repr(r["provenance"]))
            if r["scope"] not in ("run", "host", "alt"):
                _fail("invalid", rw + ".scope", repr(r["scope"]))
            if not r["source"]:
                _fail("invalid", rw + ".source", "empty")
            if r["end_ns"] < r["start_ns"]:
                _fail("invalid", rw + ".end_ns", "before its start")
            if r["scope"] in ("run", "alt") and (r["start_ns"] < p["start_ns"] or r["end_ns"] > p["end_ns"]):
                _fail("invalid", rw, "a run-scope reading outside the run's interval")
            if r["provenance"] in ("ModelBased", "Estimator") and not r.get("basis"):
                _fail("invalid", rw + ".basis", "required for %s" % r["provenance"])
            if r["scope"] == "run":
                if r["provenance"] == "HwShunt":
                    measured += r["uj"]
                else:
                    estimated += r["uj"]
        if d["measured_uj"] != measured or d["estimated_uj"] != estimated:
            _fail("total-mismatch", w, "measured %d / estimated %d, the readings sum to %d / %d"
                  % (d["measured_uj"], d["estimated_uj"], measured, estimated))


def open_receipt(data, trusted_keys, where="receipt.cose"):
    """Verify a JCR-1 receipt (receipt.md, steps 1-16) and return its payload
    (a dict). Raises :class:`~opensandbox.errors.VerificationError`."""
    data = bytes(data)
    prot_raw, payload, sig, kid = _open_cose(data, where, RECEIPT_CT)
    try:
        p = cbor_decode(payload, where + ": payload")
    except Refusal as e:
        raise VerificationError(e.code, where + ": payload", e.detail) from None
    _receipt_types(p, where + ": payload")
    if cbor_encode(p) != payload:
        _fail("non-canonical", where + ": payload", "does not re-encode to its bytes")
    _check_sig(prot_raw, payload, sig, kid, p["signer"], where)
    _receipt_valid(p, where + ": payload")
    if p["signer"] not in _trusted(trusted_keys):
        _fail("untrusted-key", where, "signed by ed25519:%s, which is not trusted" % p["signer"].hex())
    return p


def _open_decision(data, signer, claim, where="jcp-decision.cose"):
    prot_raw, payload, sig, kid = _open_cose(data, where, DECISION_CT)
    try:
        p = cbor_decode(payload, where + ": payload")
    except Refusal as e:
        raise VerificationError(e.code, where + ": payload", e.detail) from None
    if not isinstance(p, dict) or not isinstance(p.get("iss"), bytes) or len(p["iss"]) != 32:
        _fail("invalid", where + ": payload.iss", "want 32 bytes")
    _check_sig(prot_raw, payload, sig, kid, p["iss"], where)
    if p["iss"] != signer:
        _fail("invalid", where, "not signed by the attestation's signer")
    if p.get("allow") is not True:
        _fail("invalid", where, "a decision that did not allow the run")
    if p.get("image") != bytes.fromhex(claim["image"][3:]):
        _fail("invalid", where + ": payload.image", "not the claim's image")
    if p.get("tier") != claim["tier"]["chosen"]:
        _fail("invalid", where + ": payload.tier", "not the claim's chosen tier")
    return p


# ---------------------------------------------------------------- journal
def verify_journal(data, root, where="journal.cbor"):
    """Verify a journal (journal.md): its entries, strictly, and their hash
    chain's root against ``root`` (32 bytes). Returns (entries, outcome),
    the outcome a dict: status, exit_code, stdout/stderr BLAKE3 (bytes)
    and length, fuel, and the kept prefixes (None or (length, BLAKE3))."""
    data = bytes(data)
    head = blake3(b"sandbox.journal/1")
    off, entries = 0, []
    while off < len(data):
        w = "%s: entry %d (offset %d)" % (where, len(entries), off)
        try:
            e, end = cbor_decode_prefix(data, off, w)
        except Refusal as r:
            raise VerificationError(r.code, w, r.detail) from None
        raw = data[off:end]
        if not isinstance(e, dict) or set(e) != {"k", "q", "r"} or not isinstance(e["k"], str) or not e["k"]:
            _fail("invalid", w, "not a map of exactly k, q and r with a kind")
        head = blake3(head + raw)
        entries.append(e)
        off = end
    if head != root:
        _fail("address", where, "its root is b3:%s, the claim binds b3:%s" % (head.hex(), root.hex()))
    if not entries or entries[-1]["k"] != "outcome":
        _fail("missing-field", where, "no outcome entry last")
    for i, e in enumerate(entries[:-1]):
        if e["k"] == "outcome":
            _fail("invalid", "%s: entry %d" % (where, i), "an outcome entry before the last")
    o = entries[-1]
    r = o["r"]
    w = where + ": outcome"
    if o["q"] is not None:
        _fail("invalid", w, "its request is not null")
    if not isinstance(r, list) or len(r) not in (7, 9):
        _fail("invalid", w, "not an array of seven or nine items")
    if not isinstance(r[0], str) or not isinstance(r[1], int) or isinstance(r[1], bool):
        _fail("invalid", w, "status and exit code")
    for i in (2, 4):
        if not isinstance(r[i], bytes) or len(r[i]) != 32:
            _fail("invalid", w, "item %d is not a 32-byte BLAKE3" % i)
    for i in (3, 5, 6):
        _uint(r[i], "%s[%d]" % (w, i))
    kept = [None, None]
    if len(r) == 9:
        for n, i in enumerate((7, 8)):
            k = r[i]
            if k is None:
                continue
            if not (isinstance(k, list) and len(k) == 2 and isinstance(k[0], int) and isinstance(k[1], bytes)
                    and len(k[1]) == 32 and 0 <= k[0] < r[3 + 2 * n]):
                _fail("invalid", "%s[%d]" % (w, i), "a kept prefix is [length shorter than the stream, BLAKE3]")
            kept[n] = (k[0], k[1])
        if kept == [None, None]:
            _fail("non-canonical", w, "nine items that cut neither stream")
    out = {"status": r[0], "exit_code": r[1], "stdout_b3": r[2], "stdout_len": r[3], "stderr_b3": r[4],
           "stderr_len": r[5], "fuel": r[6], "stdout_kept": kept[0], "stderr_kept": kept[1]}
    return entries, out


# ---------------------------------------------------------------- the run directory
def _read(d, name, missing_code="missing"):
    p = os.path.join(d, name)
    try:
        with open(p, "rb") as f:
            return f.read()
    except FileNotFoundError:
        _fail(missing_code, name, "not in the run directory")


def _bound(d, name, addr_text):
    data = _read(d, name)
    if blake3(data) != bytes.fromhex(addr_text[3:]):
        _fail("address", name, "hashes to b3:%s, the claim binds %s" % (blake3(data).hex(), addr_text))
    return data


def _required_tier(unit, grants):
    base = {"native": 1, "wasm": 2, "vm": 5}.get(unit.get("kind"), 1)
    if grants.get("kernel"):
        base = max(base, 5)
    if grants.get("confidential"):
        base = max(base, 6)
    if grants.get("locality"):
        base = max(base, 7)
    return base


def verify_run_dir(path, trusted_keys, expect_run=None, stdout=None, stderr=None):
    """Verify a run directory (run-directory.md; see this module's
    docstring for every step) and return a :class:`VerifiedRun`.

    ``trusted_keys``: the keys to trust, text form (``ed25519:…``).
    ``expect_run``: the run id it must be (the attestation's address).
    ``stdout`` / ``stderr``: the bytes the caller received, checked against
    the whole streams' BLAKE3 and length in the journal's outcome.
    Raises :class:`~opensandbox.errors.VerificationError` at the first
    failure."""
    checked, unchecked = [], []
    claim, run_id = verify_attestation(_read(path, "attestation.json"), trusted_keys)
    checked.append("attestation: canonical, %s, Ed25519 signature by a trusted key" % claim["type"])
    if expect_run is not None and run_id != expect_run:
        _fail("address", "attestation.json", "its address is %s, not the run %s" % (run_id, expect_run))
    signer = bytes.fromhex(claim["signer"][8:])

    def canonical(name, data):
        try:
            v = parse_canonical_json(data, name)
        except Refusal as e:
            raise VerificationError(e.code, name, e.detail) from None
        if not isinstance(v, dict):
            _fail("invalid", name, "not an object")
        return v

    unit = canonical("unit.json", _bound(path, "unit.json", claim["unit"]))
    if unit.get("type") != "sandbox.unit/1" or unit.get("kind") not in ("native", "wasm", "vm"):
        _fail("invalid", "unit.json", "not a sandbox.unit/1 of a known kind")
    if unit.get("grants") != claim["grants"] or unit.get("image") != claim["image"]:
        _fail("invalid", "unit.json", "does not bind the claim's grants and image")
    grants = canonical("grants.json", _bound(path, "grants.json", claim["grants"]))
    if grants.get("type") != "sandbox.grants/1":
        _fail("invalid", "grants.json", "not a sandbox.grants/1")
    decisions = canonical("decisions.json", _bound(path, "decisions.json", claim["decisions"]))
    if decisions.get("type") != "sandbox.decisions/1":
        _fail("invalid", "decisions.json", "not a sandbox.decisions/1")
    checked.append("unit, grants and decision log: canonical, bound by address")

    receipt = open_receipt(_bound(path, "receipt.cose", claim["receipt"]), trusted_keys)
    if receipt["unit"] != bytes.fromhex(claim["unit"][3:]):
        _fail("invalid", "receipt.cose", "for another unit")
    if receipt["signer"] != signer:
        _fail("invalid", "receipt.cose", "signed by another key than the attestation")
    checked.append("receipt: JCR-1 COSE_Sign1, deterministic CBOR, signature, totals")

    files = {"attestation.json", "unit.json", "grants.json", "decisions.json", "receipt.cose"}
    if "jcp" in claim:
        _open_decision(_bound(path, "jcp-decision.cose", claim["jcp"]), signer, claim)
        files.add("jcp-decision.cose")
        checked.append("JCP decision: bound, signed by the signer, allowing this image and tier")
    elif os.path.exists(os.path.join(path, "jcp-decision.cose")):
        _fail("unrecognised", "jcp-decision.cose", "the claim cites no JCP decision")

    # 7. what a verifier can work out for itself
    tier = claim["tier"]
    req = _required_tier(unit, grants)
    if tier["required"] != "S%d" % req:
        _fail("invalid", "claim", "tier.required is %s; the unit (%s) and its grants require S%d"
              % (tier["required"], unit["kind"], req))
    chosen = int(tier["chosen"][1])
    ok = chosen == req or \
        (chosen == 0 and req == 1 and tier["reason"].endswith("; S0 on explicit request: trusted work, no confinement")) or \
        (chosen > req and "; escalated on explicit request from " in tier["reason"])
    if not ok:
        _fail("invalid", "claim", "tier.chosen %s against required S%d, reason %r" % (tier["chosen"], req, tier["reason"]))
    if (unit["kind"] == "native" and chosen == 2) or (unit["kind"] == "wasm" and chosen < 2):
        _fail("invalid", "claim", "a %s unit at %s" % (unit["kind"], tier["chosen"]))
    granted = {c.get("class") for c in grants.get("compute", []) if isinstance(c, dict)}
    accounted = {d["class"] for d in receipt["devices"]}
    for cls in unit.get("devices", []):
        if cls not in granted:
            _fail("invalid", "claim", "the unit asks for %s, and no compute grant gives it" % cls)
        if cls not in accounted:
            _fail("invalid", "claim", "the unit asks for %s, and the receipt has no account of it" % cls)
    if receipt["start_ns"] != _time_ns(claim["started"], "claim.started") or \
            receipt["end_ns"] != _time_ns(claim["ended"], "claim.ended"):
        _fail("invalid", "claim", "the receipt's interval is not the claim's started and ended")
    checked.append("tiers, devices and interval")

    outcome = None
    if "journal" in claim:
        files |= {"journal.cbor", "stdout.log", "stderr.log"}
        entries, outcome = verify_journal(_read(path, "journal.cbor"), bytes.fromhex(claim["journal"][3:]))
        if unit["kind"] == "native" and len(entries) != 1:
            _fail("invalid", "journal.cbor", "a native unit's journal holds its outcome entry alone")
        co = claim["outcome"]
        if outcome["status"] != co["status"] or outcome["exit_code"] != co.get("exit_code", -1):
            _fail("invalid", "journal.cbor", "its outcome (%s, %d) is not the claim's (%s, %s)"
                  % (outcome["status"], outcome["exit_code"], co["status"], co.get("exit_code", -1)))
        if outcome["fuel"] != receipt.get("fuel", 0):
            _fail("invalid", "journal.cbor", "its fuel %d is not the receipt's %d" % (outcome["fuel"], receipt.get("fuel", 0)))
        checked.append("journal: hash chain root, outcome agreeing with the claim and receipt")
        for name, s in (("stdout", "stdout"), ("stderr", "stderr")):
            data = _read(path, name + ".log")
            n, h = outcome[s + "_kept"] or (outcome[s + "_len"], outcome[s + "_b3"])
            if len(data) < n:
                _fail("truncated", name + ".log", "%d bytes of the %d recorded" % (len(data), n))
            if blake3(data[:n]) != h:
                _fail("address", name + ".log", "not the recorded bytes")
            if len(data) > n:
                _fail("extended", name + ".log", "%d bytes after the %d recorded" % (len(data) - n, n))
            if outcome[s + "_kept"]:
                unchecked.append("%s beyond the %d bytes kept (the whole stream's BLAKE3 is recorded)" % (name, n))
        checked.append("stdout.log and stderr.log: the recorded bytes")
        for name, got in (("stdout", stdout), ("stderr", stderr)):
            if got is None:
                continue
            got = bytes(got)
            if len(got) != outcome[name + "_len"] or blake3(got) != outcome[name + "_b3"]:
                _fail("address", name + " (received)", "the %d bytes received are not the %d sealed"
                      % (len(got), outcome[name + "_len"]))
            checked.append("the %s received: the sealed stream" % name)
    else:
        for name in ("journal.cbor", "stdout.log", "stderr.log"):
            if os.path.exists(os.path.join(path, name)):
                _fail("unrecognised", name, "the claim binds no journal: nothing vouches for it")
    if claim["type"] == "sandbox.attestation/4":
        files |= {"evidence.bin", "evidence-devices.json", "locality.json"}
        unchecked.append("hardware evidence and locality (an S6/S7 run): not verified by this SDK")
    for name in sorted(os.listdir(path)):
        if name not in files:
            _fail("unrecognised", name, "a file no record binds")
    return VerifiedRun(run_id, claim, receipt, outcome, checked, unchecked)


# ---------------------------------------------------------------- a run's bundle, from a service
#: the most bytes of one file of a run's bundle (docs/spec/bundle.md's bound)
MAX_BUNDLE_FILE = 256 << 20
#: the most entries of a run's bundle (a run directory holds at most twelve files)
MAX_BUNDLE_ENTRIES = 64
_BUNDLE_NAME = re.compile(r"^[A-Za-z]+(?:-[A-Za-z]+)*\.[A-Za-z]+$")
_RUN_ID = re.compile(r"^b3:[0-9a-f]{64}$")
_TAR_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.DIRTYPE: "a directory",
              tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device", tarfile.FIFOTYPE: "a fifo",
              tarfile.CONTTYPE: "a contiguous file", tarfile.GNUTYPE_SPARSE: "a sparse file"}


def unpack_run_bundle(src, run_id, directory, *, max_file=MAX_BUNDLE_FILE, max_entries=MAX_BUNDLE_ENTRIES,
                      max_total=1 << 30):
    """Write the files of run ``run_id`` from ``src`` (a run's bundle, as
    ``GET /v1/runs/{id}/bundle`` serves it: bytes or a binary file-like
    object of an uncompressed tar) into ``directory/HEX``, made here (it
    must not exist), and return that path. The tar is read as hostile:
    every entry must be a regular file named ``runs/HEX/NAME`` (HEX: this
    run's; NAME: letters, hyphens between them, and one dot), once, at most
    ``max_file`` bytes, ``max_entries`` entries and ``max_total`` bytes in
    all; anything else (a link, a directory, a device, a name that climbs
    or is absolute, another run's entry, a compressed or cut tar) refuses
    it with :class:`~opensandbox.errors.VerificationError` ``malformed``,
    and what was written is removed. Nothing is verified here: see
    :func:`verify_run_dir`."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        _fail("invalid", "run", "%r is not a run id" % (run_id,))
    hexid = run_id[3:]
    if isinstance(src, (bytes, bytearray, memoryview)):
        src = io.BytesIO(bytes(src))
    dest = os.path.join(directory, hexid)
    os.mkdir(dest, 0o700)
    try:
        _unpack(src, hexid, dest, max_file, max_entries, max_total)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest


def _unpack(src, hexid, dest, max_file, max_entries, max_total):
    seen, total = set(), 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        tf = tarfile.open(fileobj=src, mode="r|")  # a stream of plain tar blocks: nothing decompressed
        for m in tf:
            where = "bundle: %r" % (m.name[:200],)
            if len(seen) >= max_entries:
                _fail("malformed", "bundle", "more than %d entries" % max_entries)
            if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                _fail("malformed", where, "not a regular file: %s" % _TAR_KINDS.get(m.type, "type %r" % m.type))
            parts = m.name.split("/")
            if len(parts) != 3 or parts[0] != "runs" or parts[1] != hexid or not _BUNDLE_NAME.match(parts[2]):
                _fail("malformed", where, "not runs/%s/NAME (NAME: letters and one dot)" % hexid)
            name = parts[2]
            if name in seen:
                _fail("malformed", where, "twice in the bundle")
            if m.size < 0 or m.size > max_file:
                _fail("malformed", where, "%d bytes, over the bound of %d" % (m.size, max_file))
            total += m.size
            if total > max_total:
                _fail("malformed", "bundle", "over %d bytes in all" % max_total)
            seen.add(name)
            f = tf.extractfile(m)
            fd = os.open(os.path.join(dest, name), flags, 0o600)
            n = 0
            with os.fdopen(fd, "wb") as out:
                while n < m.size:
                    b = f.read(min(1 << 20, m.size - n))
                    if not b:
                        break
                    out.write(b)
                    n += len(b)
            if n != m.size:
                _fail("malformed", where, "cut short: %d of %d bytes" % (n, m.size))
    except (tarfile.TarError, EOFError, ValueError, UnicodeError, OverflowError) as e:
        _fail("malformed", "bundle", "not a whole tar: %s: %s" % (type(e).__name__, e))
    if not seen:
        _fail("missing", "bundle", "no file of run b3:%s" % hexid)


def verify_run_bundle(src, trusted_keys, expect_run, stdout=None, stderr=None, **bounds):
    """Verify run ``expect_run`` from its bundle ``src`` (bytes or a binary
    file-like object; :func:`unpack_run_bundle`, ``bounds`` its
    ``max_*``) under ``trusted_keys``, as :func:`verify_run_dir` does, in a
    fresh temporary directory removed after. Returns the
    :class:`VerifiedRun`."""
    tmp = tempfile.mkdtemp(prefix="opensandbox-run-")
    try:
        d = unpack_run_bundle(src, expect_run, tmp, **bounds)
        return verify_run_dir(d, trusted_keys, expect_run=expect_run, stdout=stdout, stderr=stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
