#!/usr/bin/env python3
"""An independent verifier of JCP/1 grants, delegation chains and budget
ledgers, written from docs/spec/jcp.md (and the documents it cites:
receipt.md for the COSE_Sign1 profile, canonical.md, addresses.md, keys.md,
conformance.md) alone: Python's standard library, an Ed25519 written here
from RFC 8032, a strict deterministic-CBOR decoder written here from RFC 8949
§4.2.1, and the BLAKE3 of the sibling verifier runrecord.py. None of this
project's code.

usage: jcp.py --vectors FILE.json BLAKE3_TEST_VECTORS_JSON
       jcp.py --chain CHAIN.json --root ed25519:HEX [--root ...] --now SECS
       jcp.py --ledger LEDGER.log --root ed25519:HEX [--root ...]

--vectors checks every case of a `sandbox.jcp-vectors/1` file (jcp.json,
standing.json), prints one line per case and exits 1 if any case ends other
than it states. --chain verifies one chain (a JSON array of base64url COSE
envelopes, or an object with such an array under "chain") and prints `ok` or
the refusal. --ledger replays a ledger and prints each grant's budget, or the
first refusal with its line. Before anything else the Ed25519 here checks
itself against RFC 8032 §7.1 tests 1-3, and BLAKE3 against the addresses of
addresses.md (and, given the file, the official test vectors).

Where this verifier's author found jcp.md open to more than one reading,
jcp.md now says which; every rule that depends on such a choice, or that
changed when jcp.md settled it, is marked `SPEC (jcp.md §N ...)` in a
comment at the rule.
"""
import base64
import hashlib
import ipaddress
import json
import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runrecord  # noqa: E402  (its BLAKE3 only: independent of the project's code too)

blake3 = runrecord.blake3

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BLAKE3_VECTORS = os.path.join(HERE, "..", "..", "testdata", "vectors", "blake3", "test_vectors.json")


class Reject(Exception):
    """A refusal: `code` is the spec's refusal code, `where` the location
    (a chain element and field, a ledger line, a grant id and class)."""

    def __init__(self, code, where, detail=""):
        super().__init__("%s at %s: %s" % (code, where, detail) if detail else "%s at %s" % (code, where))
        self.code, self.where, self.detail = code, where, detail


def at(where, field):
    """Join a location and a field name: `chain[2]` + `exp` -> `chain[2].exp`."""
    if not where:
        return field
    return "%s.%s" % (where, field) if field else where


# =============================================================================
# Ed25519 (RFC 8032 §5.1), verification only, with keys.md's strict checks
# =============================================================================
P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
IDENTITY = (0, 1, 1, 0)  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z


def point_add(p, q):
    """RFC 8032 §5.1.4 addition in extended coordinates (complete for a = -1)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * 2 * D * t2 % P
    d = z1 * 2 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def point_mul(s, p):
    """[s]p by double-and-add."""
    q = IDENTITY
    while s > 0:
        if s & 1:
            q = point_add(q, p)
        p = point_add(p, p)
        s >>= 1
    return q


def point_neg(p):
    x, y, z, t = p
    return (-x % P, y, z, -t % P)


def point_equal(p, q):
    return (p[0] * q[2] - q[0] * p[2]) % P == 0 and (p[1] * q[2] - q[1] * p[2]) % P == 0


def point_encode(p):
    """RFC 8032 §5.1.2: y little endian, the sign of x in the top bit."""
    zi = pow(p[2], P - 2, P)
    x, y = p[0] * zi % P, p[1] * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def point_decode(s):
    """RFC 8032 §5.1.3, strictly: None unless s is the canonical encoding of a
    curve point (y < p; no x = 0 with the sign bit set)."""
    if len(s) != 32:
        return None
    v = int.from_bytes(s, "little")
    y, sign = v & ((1 << 255) - 1), v >> 255
    if y >= P:
        return None
    u, w = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(w, 3, P) * pow(u * pow(w, 7, P), (P - 5) // 8, P) % P
    if (w * x * x - u) % P != 0:
        if (w * x * x + u) % P != 0:
            return None
        x = x * SQRT_M1 % P
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


BASE = point_decode(bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666"))


def check_key(pub, where):
    """keys.md: a signer's key is the canonical encoding of a curve point, not
    of small order ([8]A is not the identity); `weak-key` otherwise.
    SPEC (jcp.md §1, keys.md): 32 bytes that decode to no curve point at all
    are `weak-key` too, not `signature` (this verifier's first reading)."""
    a = point_decode(pub)
    if a is None:
        raise Reject("weak-key", where, "not the canonical encoding of a curve point")
    if point_equal(point_mul(8, a), IDENTITY):
        raise Reject("weak-key", where, "a point of small order")
    return a


def check_signature(pub, msg, sig, where):
    """RFC 8032 §5.1.7, cofactorless, with keys.md's checks: 64 bytes, S < L
    (`signature`), then [S]B - [k]A must encode to exactly R's bytes (which
    also refuses a non-canonical R). The key is checked first (`weak-key`)."""
    a = check_key(pub, where)
    if len(sig) != 64:
        raise Reject("signature", where, "%d bytes, not 64" % len(sig))
    s = int.from_bytes(sig[32:], "little")
    if s >= L:
        raise Reject("signature", where, "S is not below L")
    k = int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little") % L
    r = point_add(point_mul(s, BASE), point_neg(point_mul(k, a)))
    if point_encode(r) != sig[:32]:
        raise Reject("signature", where, "does not verify")


# RFC 8032 §7.1, TEST 1-3: (public key, message, signature).
RFC8032_TESTS = [
    ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]
# RFC 8032 §7.1 test 1's secret key, for the derivation check below.
RFC8032_TEST1_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"


def self_check():
    """Before anything else: this Ed25519 accepts RFC 8032's tests 1-3, refuses
    each with a bit flipped, with S + L, and under the identity key; the test 1
    key derives from its seed and has the id keys.md gives; BLAKE3 gives
    addresses.md's two examples. Exits on any disagreement."""
    def fail(what):
        sys.exit("self-check failed: " + what)
    for n, (pub, msg, sig) in enumerate(RFC8032_TESTS, 1):
        pub, msg, sig = bytes.fromhex(pub), bytes.fromhex(msg), bytes.fromhex(sig)
        try:
            check_signature(pub, msg, sig, "rfc8032")
        except Reject as e:
            fail("RFC 8032 test %d: %s" % (n, e))
        bad = [sig[:10] + bytes([sig[10] ^ 1]) + sig[11:],
               sig[:32] + (int.from_bytes(sig[32:], "little") + L).to_bytes(32, "little"),
               sig[:63]]
        for b in bad:
            try:
                check_signature(pub, msg, b, "rfc8032")
                fail("RFC 8032 test %d: a spoilt signature verified" % n)
            except Reject as e:
                if e.code != "signature":
                    fail("RFC 8032 test %d: %s" % (n, e))
    # The secret key of test 1 derives the public key of test 1 (RFC 8032 §5.1.5).
    h = hashlib.sha512(bytes.fromhex(RFC8032_TEST1_SEED)).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    if point_encode(point_mul(a, BASE)).hex() != RFC8032_TESTS[0][0]:
        fail("the RFC 8032 test 1 seed does not derive its public key")
    # keys.md: the identity point accepts R = B, S = 1 for any message; refused.
    ident = (1).to_bytes(32, "little")
    try:
        check_signature(ident, b"any", point_encode(BASE) + (1).to_bytes(32, "little"), "identity")
        fail("the identity key was accepted")
    except Reject as e:
        if e.code != "weak-key":
            fail("the identity key: %s" % e)
    # addresses.md and keys.md examples.
    if blake3(b"").hex() != "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262" or \
            blake3(b"abc").hex() != "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85":
        fail("BLAKE3 disagrees with addresses.md")
    if blake3(bytes.fromhex(RFC8032_TESTS[0][0])).hex() != \
            "6c31041268f471609c79f5f2dbcc38e4a4ab2f4d416109a4e09fcf50fd0f0062":
        fail("the test key's id disagrees with keys.md")


# =============================================================================
# Deterministic CBOR (canonical.md, RFC 8949 §4.2.1): a strict decoder
# =============================================================================
class Tag:
    """A CBOR tag around a value (the decoder keeps them; types refuse them)."""

    def __init__(self, number, value):
        self.number, self.value = number, value


class Simple:
    """A CBOR simple value other than false, true and null."""

    def __init__(self, n):
        self.n = n


class RawKey:
    """A map key that is an array, a map or a tag: kept by its bytes, so that
    the byte-level checks can run; no payload type accepts it."""

    def __init__(self, raw):
        self.raw = raw

    def __hash__(self):
        return hash(self.raw)

    def __eq__(self, other):
        return isinstance(other, RawKey) and other.raw == self.raw


MAX_DEPTH = 32  # canonical.md: nesting at most 32 deep


def cbor_decode(data, where):
    """Decode one core-deterministic CBOR item that is all of `data`, refusing
    with canonical.md's codes at the first violation (by byte offset):
    `truncated`, `malformed` (trailing bytes, reserved additional information,
    invalid UTF-8, a stray break, two-byte simple values below 32, nesting past
    32), `cbor-non-shortest`, `cbor-indefinite`, `cbor-unsorted-keys`,
    `duplicate-key`. Maps decode to dicts, floats to float, tags to Tag."""
    value, end = _item(data, 0, where, 1)
    if end != len(data):
        raise Reject("malformed", where, "%d bytes after the item, at offset %d" % (len(data) - end, end))
    return value


def _need(data, off, n, where):
    if off + n > len(data):
        raise Reject("truncated", where, "the item ends at offset %d, inside a value" % len(data))


def _head(data, off, where):
    """The head at off: (major type, additional information, argument, offset
    after the head). The argument must be in its shortest form."""
    _need(data, off, 1, where)
    ib = data[off]
    major, ai = ib >> 5, ib & 31
    if ai < 24:
        return major, ai, ai, off + 1
    if ai in (28, 29, 30):
        raise Reject("malformed", where, "reserved additional information %d at offset %d" % (ai, off))
    if ai == 31:
        if major in (2, 3, 4, 5):
            raise Reject("cbor-indefinite", where, "an indefinite length at offset %d" % off)
        raise Reject("malformed", where, "additional information 31 for major type %d at offset %d" % (major, off))
    n = 1 << (ai - 24)
    _need(data, off + 1, n, where)
    arg = int.from_bytes(data[off + 1:off + 1 + n], "big")
    if major != 7:
        if (ai == 24 and arg < 24) or (ai > 24 and arg < (1 << (8 * (n >> 1)))):
            raise Reject("cbor-non-shortest", where, "an argument not in its shortest form at offset %d" % off)
    return major, ai, arg, off + 1 + n


def _float_shortest(ai, raw, where, off):
    """canonical.md: a float in the shortest of half, single, double that keeps
    its value; NaN only as f97e00."""
    if ai == 25:
        v = struct.unpack(">e", raw)[0]
        if v != v and raw != b"\x7e\x00":
            raise Reject("cbor-non-shortest", where, "a NaN other than f97e00 at offset %d" % off)
        return v
    v = struct.unpack(">f" if ai == 26 else ">d", raw)[0]
    if v != v:
        raise Reject("cbor-non-shortest", where, "a NaN other than f97e00 at offset %d" % off)
    shorter = ["e"] if ai == 26 else ["e", "f"]
    for fmt in shorter:
        try:
            if struct.pack(">d", struct.unpack(">" + fmt, struct.pack(">" + fmt, v))[0]) == struct.pack(">d", v):
                raise Reject("cbor-non-shortest", where, "a float that fits a shorter form at offset %d" % off)
        except (OverflowError, struct.error):
            pass
    return v


def _item(data, off, where, depth):
    if depth > MAX_DEPTH:
        raise Reject("malformed", where, "nested more than %d deep at offset %d" % (MAX_DEPTH, off))
    start = off
    major, ai, arg, off = _head(data, off, where)
    if major == 0:
        return arg, off
    if major == 1:
        return -1 - arg, off
    if major in (2, 3):
        _need(data, off, arg, where)
        raw = bytes(data[off:off + arg])
        if major == 2:
            return raw, off + arg
        try:
            return raw.decode("utf-8"), off + arg
        except UnicodeDecodeError:
            raise Reject("malformed", where, "a text string that is not UTF-8 at offset %d" % start)
    if major == 4:
        out = []
        for _ in range(arg):
            v, off = _item(data, off, where, depth + 1)
            out.append(v)
        return out, off
    if major == 5:
        out, prev = {}, None
        for _ in range(arg):
            kstart = off
            k, off = _item(data, off, where, depth + 1)
            kraw = bytes(data[kstart:off])
            if prev is not None:
                if kraw == prev:
                    raise Reject("duplicate-key", where, "a map key twice at offset %d" % kstart)
                if kraw < prev:
                    raise Reject("cbor-unsorted-keys", where, "a map key out of bytewise order at offset %d" % kstart)
            prev = kraw
            v, off = _item(data, off, where, depth + 1)
            if isinstance(k, (list, dict, Tag)):
                k = RawKey(kraw)
            out[k] = v
        return out, off
    if major == 6:
        v, off = _item(data, off, where, depth + 1)
        return Tag(arg, v), off
    # major 7
    if ai < 24:
        if ai in (20, 21, 22):
            return (False, True, None)[ai - 20], off
        return Simple(ai), off
    if ai == 24:
        if arg < 32:
            raise Reject("malformed", where, "simple value %d in the two-byte form at offset %d" % (arg, start))
        return Simple(arg), off
    return _float_shortest(ai, bytes(data[start + 1:off]), where, start), off


def cbor_encode(v):
    """Core-deterministic encoding of ints, bytes, text, lists, dicts (keys
    sorted bytewise by their encodings), bools and None: what this verifier
    signs over (the Sig_structure) and how it re-encodes."""
    def head(major, n):
        if n < 24:
            return bytes([(major << 5) | n])
        for ai, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
            if n < (1 << (8 * size)):
                return bytes([(major << 5) | ai]) + n.to_bytes(size, "big")
        raise ValueError("integer too large for CBOR")
    if v is False:
        return b"\xf4"
    if v is True:
        return b"\xf5"
    if v is None:
        return b"\xf6"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode("utf-8")
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(cbor_encode(x) for x in v)
    if isinstance(v, dict):
        items = sorted((cbor_encode(k), cbor_encode(x)) for k, x in v.items())
        return head(5, len(items)) + b"".join(k + x for k, x in items)
    if isinstance(v, Tag):
        return head(6, v.number) + cbor_encode(v.value)
    raise ValueError("cannot encode %r" % (v,))


# =============================================================================
# Payload types (jcp.md §2, §3, §5, §5.1, §6, §8)
# =============================================================================
CLASSES = ["Cpu", "Simd", "Gpu", "Npu", "Tpu", "Lpu", "Photonic", "Quantum"]
TIERS = ["S%d" % i for i in range(8)]

# Field kinds: uint, bool, text, key (bstr(32), a public key), addr (bstr(32),
# a content address), nonce (bstr(16)), addrset, textset, addrlist, classmap,
# ceilings, caveats, template, rate. Each table: name -> (kind, required).
GRANT = {
    "v": ("uint", True), "iss": ("key", True), "aud": ("key", True),
    "parent": ("addr", False), "policy": ("addr", False),
    "iat": ("uint", True), "exp": ("uint", True), "nonce": ("nonce", True),
    "depth": ("uint", True), "images": ("addrset", True),
    "ceilings": ("ceilings", True), "caveats": ("caveats", True),
}
POLICY = {
    "v": ("uint", True), "iss": ("key", True), "grant": ("addr", True),
    "minter": ("key", True), "to": ("key", True), "template": ("template", True),
    "max": ("uint", True), "rate": ("rate", True), "events": ("textset", True),
    "iat": ("uint", True), "exp": ("uint", True), "nonce": ("nonce", True),
}
# SPEC (jcp.md §6): every member of a template is required (this verifier's
# first reading).
TEMPLATE = {
    "ttl": ("uint", True), "depth": ("uint", True), "images": ("addrset", True),
    "ceilings": ("ceilings", True), "caveats": ("caveats", True),
}
INVOCATION = {
    "v": ("uint", True), "iss": ("key", True), "grant": ("addr", True),
    "image": ("addr", False), "model": ("text", False),
    "iat": ("uint", True), "nonce": ("nonce", True),
}
AMENDMENT = {
    "v": ("uint", True), "iss": ("key", True), "grant": ("addr", True),
    "seq": ("uint", True), "iat": ("uint", True), "exp": ("uint", True),
    "images": ("addrset", True), "ceilings": ("ceilings", True), "caveats": ("caveats", True),
}
# SPEC (jcp.md §7, the revocation's table): {v, iss, grant, iat}, all
# required (this verifier's first reading).
REVOCATION = {
    "v": ("uint", True), "iss": ("key", True), "grant": ("addr", True), "iat": ("uint", True),
}
CHECKPOINT = {
    "v": ("uint", True), "iss": ("key", True), "grant": ("addr", True),
    "run": ("addr", True), "state": ("addr", False), "seq": ("uint", True), "iat": ("uint", True),
}
DECISION = {
    "v": ("uint", True), "iss": ("key", True), "allow": ("bool", True),
    "code": ("text", False), "where": ("text", False), "detail": ("text", False),
    "chain": ("addrlist", True), "invocation": ("addr", False), "image": ("addr", True),
    "tier": ("text", True), "reserve": ("classmap", False), "reservation": ("uint", False),
    "at": ("uint", True),
}
RATE = {"n": ("uint", True), "per": ("uint", True)}
CAVEATS = {
    "models": ("textset", False), "tiers": ("textset", False), "hosts": ("textset", False),
    "paths": ("textset", False), "runs": ("uint", False), "rate": ("rate", False),
}

CONTENT_TYPES = {
    "application/jcp-grant+cbor": ("grant", GRANT),
    "application/jcp-mint-policy+cbor": ("policy", POLICY),
    "application/jcp-invocation+cbor": ("invocation", INVOCATION),
    "application/jcp-amendment+cbor": ("amendment", AMENDMENT),
    "application/jcp-revocation+cbor": ("revocation", REVOCATION),
    "application/jcp-checkpoint+cbor": ("checkpoint", CHECKPOINT),
    "application/jcp-decision+cbor": ("decision", DECISION),
}


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _strip_tags(v):
    """SPEC (jcp.md §2, "no tags"): a tag in a payload is refused
    `non-canonical`: the payload is read as its members' types, which carry
    no tags, and would re-encode without it (step 10e). The value is checked as if the
    tag were not there; the re-encoding then differs."""
    if isinstance(v, Tag):
        return _strip_tags(v.value)
    if isinstance(v, list):
        return [_strip_tags(x) for x in v]
    if isinstance(v, dict):
        return {k: _strip_tags(x) for k, x in v.items()}
    return v


def _text_keys(m, where):
    """SPEC (jcp.md §2 step 10b): a map with text keys, else `invalid`."""
    if not isinstance(m, dict) or not all(isinstance(k, str) for k in m):
        raise Reject("invalid", where or "payload", "not a map with text keys")


def _members(m, table, where):
    """SPEC (jcp.md §2 step 10b): a map with text keys (`invalid`), no
    member but its type's (`unknown-field`, the first in key order), every
    required member (`missing-field`, in the order of the type's table)."""
    _text_keys(m, where)
    for k in sorted(m, key=lambda x: x.encode("utf-8")):
        if k not in table:
            raise Reject("unknown-field", at(where, k), "not a member of this type")
    for k, (kind, req) in table.items():
        if req and k not in m:
            raise Reject("missing-field", at(where, k), "required")
    # SPEC (jcp.md §2 step 10b; canonical.md on null): a member written null:
    # required, `invalid` (not a value of its type); optional, `non-canonical`.
    for k in sorted(m, key=lambda x: x.encode("utf-8")):
        if m[k] is None:
            raise Reject("invalid" if table[k][1] else "non-canonical", at(where, k), "written null")


CAVEAT_EMPTY = ([], 0, {}, None)


def _caveats_form(c, where):
    """SPEC (jcp.md §2 step 10c, §3.1): a map with text keys (`invalid`); a
    caveat outside the closed set (`unknown-critical`); a caveat written out
    empty, [] or 0 or {} or null (`non-canonical`: an absent caveat is left out,
    canonical.md); a rate's members (`unknown-field`, `missing-field`)."""
    _text_keys(c, where)
    keys = sorted(c, key=lambda x: x.encode("utf-8"))
    for k in keys:
        if k not in CAVEATS:
            raise Reject("unknown-critical", at(where, k), "a caveat this version does not know")
    for k in keys:
        v = c[k]
        if v is None or not isinstance(v, bool) and any(type(v) is type(e) and v == e for e in CAVEAT_EMPTY):
            raise Reject("non-canonical", at(where, k), "a caveat written out empty")
    if "rate" in c:
        _members(c["rate"], RATE, at(where, "rate"))


LENGTHS = {"key": 32, "addr": 32, "nonce": 16}


def _lengths(m, table, where):
    """SPEC (jcp.md §2 step 10d): a byte string of another length than its
    member's, alone or in a list of ids (`invalid`: not a value of its
    type). A value that is not a byte string is left to the type check."""
    for k in sorted(m, key=lambda x: x.encode("utf-8")):
        kind = table[k][0]
        if kind in LENGTHS and isinstance(m[k], bytes) and len(m[k]) != LENGTHS[kind]:
            raise Reject("invalid", at(where, k), "%d bytes, not %d" % (len(m[k]), LENGTHS[kind]))
        if kind in ("addrset", "addrlist") and isinstance(m[k], list):
            for i, x in enumerate(m[k]):
                if isinstance(x, bytes) and len(x) != 32:
                    raise Reject("invalid", "%s[%d]" % (at(where, k), i), "%d bytes, not 32" % len(x))


def _typecheck(kind, v, where):
    """SPEC (jcp.md §2 step 10e; canonical.md "a value of the wrong type"):
    a value not of its member's type is `invalid` (this verifier first read
    §2's old "malformed")."""
    def bad(what):
        raise Reject("invalid", where, "not %s" % what)
    if kind == "uint":
        if not _is_uint(v):
            bad("an unsigned integer")
    elif kind == "bool":
        if not isinstance(v, bool):
            bad("a boolean")
    elif kind == "text":
        if not isinstance(v, str):
            bad("a text string")
    elif kind in ("key", "addr", "nonce"):
        if not isinstance(v, bytes):
            bad("a byte string")
    elif kind in ("addrset", "addrlist"):
        if not isinstance(v, list):
            bad("an array")
        for i, x in enumerate(v):
            _typecheck("addr", x, "%s[%d]" % (where, i))
    elif kind == "textset":
        if not isinstance(v, list):
            bad("an array")
        for i, x in enumerate(v):
            _typecheck("text", x, "%s[%d]" % (where, i))
    elif kind in ("ceilings", "classmap"):
        if not isinstance(v, dict):
            bad("a map")
        for k, x in v.items():
            if not isinstance(k, str):
                bad("a map with text keys")
            _typecheck("uint", x, "%s.%s" % (where, k))
    elif kind == "rate":
        _types(v, RATE, where)
    elif kind == "template":
        _types(v, TEMPLATE, where)
    elif kind == "caveats":
        _types(v, CAVEATS, where)


def _types(m, table, where):
    """Each member's value of its type, in key order."""
    if not isinstance(m, dict):
        raise Reject("invalid", where or "payload", "not a map")
    for k in sorted(m, key=lambda x: x.encode("utf-8")):
        _typecheck(table[k][0], m[k], at(where, k))


def _empty_optional(m, table, where):
    """canonical.md: an optional member is left out, never written in its
    empty form (0, "", h'', [], {}, false): `non-canonical` (the payload
    would not re-encode to its bytes; jcp.md §2 step 10e). The all-zero
    address is step 10f's."""
    for k, v in m.items():
        kind, req = table[k]
        if kind == "bool":
            empty = v is False
        elif kind == "addr":
            empty = False
        else:
            empty = v in (0, "", b"") or v == [] or v == {}
        if not req and empty:
            raise Reject("non-canonical", at(where, k), "an optional member written out empty")
        if kind == "caveats":
            _empty_optional(v, CAVEATS, at(where, k))
        elif kind == "template":
            _empty_optional(v, TEMPLATE, at(where, k))


def _canonical_form(kind, p, table, where):
    """SPEC (jcp.md §2 step 10f; canonical.md's corner cases): the all-zero
    address names nothing: in a required member or a list of ids
    `missing-field`, in an optional member `non-canonical`; then a set out
    of order or with a repeat is `non-canonical` (a second form of the same
    content; this verifier first read §2's old "invalid"). Sets: images,
    then models, tiers, hosts, paths; a policy's template's, then events."""
    zero = bytes(32)
    opt = []
    for k, (fk, req) in table.items():
        if k in p and fk == "addr":
            if req and p[k] == zero:
                raise Reject("missing-field", at(where, k), "the all-zero address names nothing")
            if not req:
                opt.append(k)
        if k in p and fk == "addrlist":
            for i, x in enumerate(p[k]):
                if x == zero:
                    raise Reject("missing-field", "%s[%d]" % (at(where, k), i), "the all-zero address names nothing")
    terms = p["template"] if kind == "policy" else p
    tw = at(where, "template") if kind == "policy" else where
    if "images" in terms:
        for i, x in enumerate(terms["images"]):
            if x == zero:
                raise Reject("missing-field", "%s.images[%d]" % (tw, i), "the all-zero address names nothing")
    for k in opt:
        if p[k] == zero:
            raise Reject("non-canonical", at(where, k), "the all-zero address means absent: left out")
    sets = []
    if "images" in terms:
        sets.append((terms["images"], at(tw, "images")))
        for name in ("models", "tiers", "hosts", "paths"):
            if name in terms["caveats"]:
                sets.append((terms["caveats"][name], at(tw, "caveats." + name)))
    if kind == "policy":
        sets.append((p["events"], at(where, "events")))
    for v, w in sets:
        _check_set(v, w)


def _check_set(v, where):
    """§2: a set is sorted ascending (bytewise for bstr, by UTF-8 bytes for
    text), no duplicates. SPEC (jcp.md §2, canonical.md "a list out of its
    order ... or with a repeat"): `non-canonical`."""
    keys = [x.encode("utf-8") if isinstance(x, str) else x for x in v]
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1]:
            raise Reject("non-canonical", where, "a set out of order or with a repeat at [%d]" % i)


def _check_ceilings(c, where):
    """§3: 1-8 known device classes, each ceiling ≥ 1 µJ, else `invalid`."""
    if not 1 <= len(c) <= 8:
        raise Reject("invalid", where, "%d classes, not 1-8" % len(c))
    for k, v in c.items():
        if k not in CLASSES:
            raise Reject("invalid", at(where, k), "not a device class")
        if v < 1:
            raise Reject("invalid", at(where, k), "a ceiling below 1 µJ")


def _check_images(v, where):
    """§3: a set of 1-256 content addresses."""
    if not 1 <= len(v) <= 256:
        raise Reject("invalid", where, "%d images, not 1-256" % len(v))


def _check_caveats(c, where):
    """§3.1: each caveat's values (`invalid` otherwise)."""
    for name in ("models", "tiers", "hosts", "paths"):
        if name in c:
            w = at(where, name)
            # SPEC (jcp.md §3.1): 1 to 256 members (the order is step 10f's).
            if len(c[name]) > 256:
                raise Reject("invalid", w, "more than 256 members")
            for i, x in enumerate(c[name]):
                wi = "%s[%d]" % (w, i)
                if name == "models" and x == "":
                    raise Reject("invalid", wi, "an empty model name")
                if name == "tiers" and x not in TIERS:
                    raise Reject("invalid", wi, "not a tier S0-S7")
                if name == "hosts":
                    parse_pattern(x, wi)
                if name == "paths" and not clean_path(x):
                    raise Reject("invalid", wi, "not an absolute, clean path")
    if "runs" in c and c["runs"] < 1:
        raise Reject("invalid", at(where, "runs"), "below 1")
    if "rate" in c:
        _check_rate(c["rate"], at(where, "rate"))


def _check_rate(r, where):
    for k in ("n", "per"):
        if r[k] < 1:
            raise Reject("invalid", at(where, k), "below 1")


def _check_terms(p, where):
    """The value rules shared by grants, templates and amendments (§3)."""
    if "depth" in p and p["depth"] > 64:
        raise Reject("invalid", at(where, "depth"), "above 64")
    _check_images(p["images"], at(where, "images"))
    _check_ceilings(p["ceilings"], at(where, "ceilings"))
    _check_caveats(p["caveats"], at(where, "caveats"))


def _check_events(ev, where):
    """§6: `event:NAME`, `pool-claim:POOL`, `every:SECONDS`, at least one."""
    # SPEC (jcp.md §6): 1 to 256 events.
    if not 1 <= len(ev) <= 256:
        raise Reject("invalid", where, "%d events, not 1-256" % len(ev))
    for i, e in enumerate(ev):
        kind, _, rest = e.partition(":")
        ok = rest != "" and kind in ("event", "pool-claim", "every")
        if kind == "every":
            # SPEC (jcp.md §6): SECONDS is 1 to 9 decimal digits, no leading zero.
            ok = rest.isdigit() and rest.isascii() and rest[0] != "0" and len(rest) <= 9
        if not ok:
            raise Reject("invalid", "%s[%d]" % (where, i), "not event:NAME, pool-claim:POOL or every:SECONDS")


def _validate(kind, p, where):
    """receipt.md step 15 for JCP payloads: each type's value rules (`invalid`)."""
    if p["v"] != 1:
        raise Reject("invalid", at(where, "v"), "version %d, not 1" % p["v"])
    if kind == "grant":
        if p["exp"] <= p["iat"]:
            raise Reject("invalid", at(where, "exp"), "exp is not after iat")
        # SPEC (jcp.md §3): `policy` without `parent` is `invalid` (this
        # verifier's first reading).
        if "policy" in p and "parent" not in p:
            raise Reject("invalid", at(where, "policy"), "a policy without a parent")
        _check_terms(p, where)
    elif kind == "policy":
        if p["exp"] <= p["iat"]:
            raise Reject("invalid", at(where, "exp"), "exp is not after iat")
        if p["max"] < 1:
            raise Reject("invalid", at(where, "max"), "below 1")
        _check_rate(p["rate"], at(where, "rate"))
        _check_events(p["events"], at(where, "events"))
        t = p["template"]
        if t["ttl"] < 1:
            raise Reject("invalid", at(where, "template.ttl"), "below 1")
        _check_terms(t, at(where, "template"))
    elif kind == "amendment":
        if p["seq"] < 1:
            raise Reject("invalid", at(where, "seq"), "below 1")
        # SPEC (jcp.md §8): the types and value rules of a grant's images,
        # ceilings and caveats; `exp > iat` is not required of an amendment
        # (this verifier's first reading).
        _check_terms(p, where)
    elif kind == "checkpoint":
        if p["seq"] < 1:
            raise Reject("invalid", at(where, "seq"), "below 1")
    elif kind == "decision":
        allowed = p["allow"]
        for k in ("code", "where", "detail"):
            if allowed and k in p:
                raise Reject("invalid", at(where, k), "present on an allowed decision")
        for k in ("reserve", "reservation"):
            if not allowed and k in p:
                raise Reject("invalid", at(where, k), "present on a denial")
        if not allowed and "code" not in p:
            raise Reject("invalid", at(where, "code"), "a denial without its code")
        if allowed and ("reserve" not in p or "reservation" not in p):
            raise Reject("invalid", at(where, "reserve"), "an allowed decision reserves")
        if p["tier"] not in TIERS:
            raise Reject("invalid", at(where, "tier"), "not a tier S0-S7")
        for k in p.get("reserve", {}):
            if k not in CLASSES:
                raise Reject("invalid", at(where, "reserve." + k), "not a device class")


# =============================================================================
# The envelope (jcp.md §2, receipt.md § Envelope and § Verification order)
# =============================================================================
class Token:
    """An opened JCP object: `kind` (grant, policy, ...), `id` (the BLAKE3 of
    its envelope bytes), `p` (the payload), `raw` (the envelope bytes)."""

    def __init__(self, kind, raw, p, where):
        self.kind, self.raw, self.p, self.where = kind, raw, p, where
        self.id = blake3(raw)

    def __getitem__(self, k):
        return self.p[k]

    def get(self, k, default=None):
        return self.p.get(k, default)

    def __contains__(self, k):
        return k in self.p


def open_token(raw, where):
    """Open one COSE_Sign1 JCP object, in receipt.md's order (steps 1-15) with
    jcp.md §2's content types and payload codes, refusing the first failure."""
    # SPEC (jcp.md §2): an envelope of more than 65536 bytes is refused
    # `invalid` before anything else.
    if len(raw) > 65536:
        raise Reject("invalid", where, "%d bytes; a token is at most 65536" % len(raw))
    # 1. the envelope is core-deterministic CBOR
    env = cbor_decode(raw, where)
    # 2. tag 18 around an array of four: [bstr, map, bstr, bstr]
    if raw[:2] != b"\xd2\x84" or not isinstance(env, Tag) or env.number != 18:
        raise Reject("malformed", where, "not tag 18 around an array of four")
    arr = env.value
    if not (isinstance(arr[0], bytes) and isinstance(arr[1], dict)
            and isinstance(arr[2], bytes) and isinstance(arr[3], bytes)):
        raise Reject("malformed", where, "not [bstr, map, bstr, bstr]")
    prot_raw, unprot, payload_raw, sig = arr
    # 3. the protected header: core-deterministic, a map with integer labels
    try:
        prot = cbor_decode(prot_raw, where)
    except Reject as e:
        raise Reject("header", at(where, "protected"), "%s: %s" % (e.code, e.detail))
    if not isinstance(prot, dict) or not all(isinstance(k, int) and not isinstance(k, bool) for k in prot):
        raise Reject("header", at(where, "protected"), "not a map with integer labels")
    # 4. crit
    if 2 in prot:
        raise Reject("unknown-critical", at(where, "protected.crit"), "this profile defines no critical headers")
    # 5. no label but 1, 3, 4
    for k in prot:
        if k not in (1, 3, 4):
            raise Reject("header", at(where, "protected"), "label %d" % k)
    # 6. the unprotected header is {}
    if unprot != {}:
        raise Reject("header", at(where, "unprotected"), "not the empty map")
    # 7. alg
    alg = prot.get(1)
    if not (isinstance(alg, int) and not isinstance(alg, bool) and alg in (-8, -19)):
        raise Reject("alg", at(where, "protected.alg"), "algorithm %r" % (alg,))
    # 8. content type: one of §2's
    ct = prot.get(3)
    if not isinstance(ct, str) or ct not in CONTENT_TYPES:
        raise Reject("header", at(where, "protected.content-type"), "%r is not a JCP content type" % (ct,))
    kind, table = CONTENT_TYPES[ct]
    # 9. kid
    kid = prot.get(4)
    if not isinstance(kid, bytes) or len(kid) != 32:
        raise Reject("header", at(where, "protected.kid"), "not a 32-byte string")
    # 10. the payload's form. SPEC (jcp.md §2 step 10, written out when the
    # spec was settled), a-f in this order; the byte-level faults have the
    # codes of canonical.md (this verifier's first reading, as receipt.md
    # step 10 and the pack's receipt-*.cose pin), `non-canonical` is for a
    # decoded payload in a second form; all of step 10 comes before the
    # signature, the value rules (`invalid`) after it.
    p = _strip_tags(cbor_decode(payload_raw, at(where, "payload")))   # a
    _members(p, table, where)                                          # b
    if kind == "policy":
        _members(p["template"], TEMPLATE, at(where, "template"))
    for c, w in ((p.get("caveats"), at(where, "caveats")),             # c
                 (p["template"].get("caveats") if kind == "policy" else None, at(where, "template.caveats"))):
        if c is not None:
            _caveats_form(c, w)
    if kind == "policy":
        _members(p["rate"], RATE, at(where, "rate"))
    _lengths(p, table, where)                                          # d
    if kind == "policy":
        _lengths(p["template"], TEMPLATE, at(where, "template"))
    _types(p, table, where)                                            # e
    _empty_optional(p, table, where)
    if cbor_encode(p) != payload_raw:  # a tag: the value without it re-encodes otherwise
        raise Reject("non-canonical", where, "the payload does not re-encode to its bytes")
    _canonical_form(kind, p, table, where)                             # f
    # 11. kid is the id of the payload's iss
    if kid != blake3(p["iss"]):
        raise Reject("header", at(where, "protected.kid"), "not the id of the payload's iss")
    # 12-14. the key, then the signature over ["Signature1", protected, h'', payload]
    check_key(p["iss"], at(where, "iss"))
    sig_structure = cbor_encode(["Signature1", prot_raw, b"", payload_raw])
    check_signature(p["iss"], sig_structure, sig, at(where, "signature"))
    # 15. the type's value rules
    _validate(kind, p, where)
    return Token(kind, bytes(raw), p, where)


# =============================================================================
# Hosts and paths (§3.1)
# =============================================================================
def _dns_name(s):
    """A lower-case DNS name: labels of a-z, 0-9 and '-', 1-63 bytes, not
    starting or ending with '-', 253 bytes in all, no trailing dot.
    SPEC (jcp.md §3.1): and a last label not all digits (no name reads as
    an IPv4 address: `010.0.0.1` is neither)."""
    if not s or len(s) > 253:
        return False
    labels = s.split(".")
    for label in labels:
        if not 1 <= len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        if any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in label):
            return False
    return not labels[-1].isdigit()


def _port(port):
    if not (port.isascii() and port.isdigit()) or port[0] == "0" or not 1 <= int(port) <= 65535:
        return None
    return int(port)


def _split_port(s):
    """HOST[:PORT] -> (host, port or None, bracketed), or None if malformed.
    SPEC (jcp.md §3.1): an IPv6 address or prefix takes a port only in
    brackets (`[2001:db8::1]:443`), and brackets come only with a port."""
    if s.startswith("["):
        close = s.find("]")
        if close < 0 or not s[close + 1:].startswith(":"):
            return None
        port = _port(s[close + 2:])
        return None if port is None else (s[1:close], port, True)
    if s.count(":") == 1:
        host, port = s.split(":")
        port = _port(port)
        return None if port is None else (host, port, False)
    return s, None, False


def parse_pattern(s, where=None):
    """§3.1 host pattern -> (kind, value, port): kind `dns` (a name), `wild`
    (`*.` + name: any name strictly below it), `net` (an address or a
    prefix: SPEC (jcp.md §3.1) an address is read as the prefix of its full
    length, /32 or /128). SPEC (jcp.md §3.1): addresses and prefixes only in
    their canonical text (host bits clear, IPv6 as RFC 5952 writes it),
    never with a zone, never IPv4-mapped IPv6. Returns None for a bad
    pattern, or refuses `invalid` at `where` when given."""
    def bad():
        if where is not None:
            raise Reject("invalid", where, "%r is not a host pattern" % s)
        return None
    hp = _split_port(s) if isinstance(s, str) else None
    if hp is None:
        return bad()
    host, port, bracketed = hp
    net = None
    if "/" in host:
        try:
            net = ipaddress.ip_network(host, strict=True)
        except ValueError:
            return bad()
        if str(net) != host:
            return bad()
    else:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None:
            if str(ip) != host:
                return bad()
            net = ipaddress.ip_network(host)
    if net is not None:
        if "%" in host or (net.version == 6 and net.network_address.ipv4_mapped is not None):
            return bad()
        if bracketed and net.version != 6:
            return bad()
        return ("net", net, port)
    if bracketed or ":" in host:
        return bad()
    if host.startswith("*."):
        return ("wild", host[2:], port) if _dns_name(host[2:]) else bad()
    return ("dns", host, port) if _dns_name(host) else bad()


def _below(name, parent):
    return name.endswith("." + parent)


def covers_destination(pat, dest):
    """§3.1: a pattern covers a destination (a `dns` name or an `ip` address
    with its port) when the names match as stated and the pattern has no
    port or the same port. A DNS pattern never covers an IP address.
    SPEC (jcp.md §3.1): an IPv4-mapped IPv6 destination is its IPv4 address."""
    pk, pv, pport = pat
    dk, dv, dport = dest
    if pport is not None and pport != dport:
        return False
    if dk == "dns":
        return (pk == "dns" and pv == dv) or (pk == "wild" and _below(dv, pv))
    if dk == "ip":
        if dv.version == 6 and dv.ipv4_mapped is not None:
            dv = dv.ipv4_mapped
        return pk == "net" and dv.version == pv.version and dv in pv
    return False


def covers_pattern(parent, child):
    """§3.2 hosts: a child pattern is covered by a parent pattern: a name by
    the same name or a `*.` above it; a `*.` by an equal or wider `*.`; an
    address or prefix by an equal or shorter prefix containing it (SPEC
    (jcp.md §3.2): an address is its /32 or /128, so `10.0.0.1` and
    `10.0.0.1/32` cover each other); a port-less child only by a port-less
    parent, a child with a port by a parent with that port or none."""
    pk, pv, pport = parent
    ck, cv, cport = child
    if cport is None and pport is not None:
        return False
    if cport is not None and pport is not None and cport != pport:
        return False
    if ck == "dns":
        return (pk == "dns" and pv == cv) or (pk == "wild" and _below(cv, pv))
    if ck == "wild":
        return pk == "wild" and (cv == pv or _below(cv, pv))
    if ck == "net":
        return pk == "net" and cv.version == pv.version and pv.prefixlen <= cv.prefixlen and cv.subnet_of(pv)
    return False


def clean_path(s):
    """§3.1: absolute and clean: starts with '/', no empty, '.' or '..'
    component, no trailing '/' (but '/' itself)."""
    if not isinstance(s, str) or not s.startswith("/") or "\x00" in s:
        return False
    if s == "/":
        return True
    return all(c not in ("", ".", "..") for c in s[1:].split("/"))


def path_below(child, parent):
    """equal to or below: `/data/x` is below `/data`, `/database` is not.
    SPEC (jcp.md §3.1, §5): a path that is not absolute and clean is below
    nothing (`/data/../etc` is not below `/data`)."""
    if not clean_path(child):
        return False
    return child == parent or parent == "/" or child.startswith(parent + "/")


# =============================================================================
# Terms and attenuation (§3.2, §6, §8)
# =============================================================================
def terms_of(p, exp=None):
    """The terms §3.2 compares: depth, images, ceilings, exp, caveats."""
    return {"depth": p.get("depth"), "images": p["images"], "ceilings": p["ceilings"],
            "exp": p["exp"] if exp is None else exp, "caveats": p["caveats"]}


def attenuation(child, parent, depth="grant", exp_bound=None):
    """§3.2: the first term at which `child` widens `parent`, as (code, where),
    or None. `depth`: "grant" checks both depth rows, "template" checks the
    child's depth against a template's (≤), None skips depth (§8).
    `exp_bound`, when given, replaces the exp row's bound (§6)."""
    if depth == "grant":
        if parent["depth"] < 1:
            return "depth-exhausted", "depth"
        if child["depth"] > parent["depth"] - 1:
            return "widen-depth", "depth"
    elif depth == "template":
        # SPEC (jcp.md §6): a minted child's depth is at most the template's
        # (not the template's − 1; this verifier's first reading).
        if child["depth"] > parent["depth"]:
            return "widen-depth", "depth"
    if not set(child["images"]) <= set(parent["images"]):
        return "widen-images", "images"
    for c in CLASSES:
        if c in child["ceilings"]:
            if c not in parent["ceilings"] or child["ceilings"][c] > parent["ceilings"][c]:
                return "widen-ceiling", "ceilings." + c
    bound = parent["exp"] if exp_bound is None else exp_bound
    if child["exp"] > bound:
        return "widen-expiry", "exp"
    cc, pc = child["caveats"], parent["caveats"]
    for name in ("models", "tiers"):
        if name in pc and (name not in cc or not set(cc[name]) <= set(pc[name])):
            return "widen-" + name, "caveats." + name
    if "hosts" in pc:
        if "hosts" not in cc:
            return "widen-hosts", "caveats.hosts"
        parents = [parse_pattern(h) for h in pc["hosts"]]
        for h in cc["hosts"]:
            ch = parse_pattern(h)
            if not any(covers_pattern(pp, ch) for pp in parents):
                return "widen-hosts", "caveats.hosts"
    if "paths" in pc:
        if "paths" not in cc or not all(any(path_below(c, p) for p in pc["paths"]) for c in cc["paths"]):
            return "widen-paths", "caveats.paths"
    if "runs" in pc and ("runs" not in cc or cc["runs"] > pc["runs"]):
        return "widen-runs", "caveats.runs"
    if "rate" in pc:
        if "rate" not in cc or cc["rate"]["n"] > pc["rate"]["n"] or cc["rate"]["per"] < pc["rate"]["per"]:
            return "widen-rate", "caveats.rate"
    return None


def check_policy_bounds(pol, held, where):
    """§6: the policy's `exp` ≤ the held grant's (`widen-expiry`), and its
    template, read as a grant with exp = the policy's exp, ⊑ the held grant
    (`widen-*`, depth rows included)."""
    if pol["exp"] > held["exp"]:
        raise Reject("widen-expiry", at(where, "exp"), "the policy outlives the held grant")
    w = attenuation(terms_of(pol["template"], exp=pol["exp"]), terms_of(held.p))
    if w:
        raise Reject(w[0], at(where, "template." + w[1]), "the template widens the held grant")


def check_minted(child, pol, held, where):
    """§6: a child minted under `pol`: exp ≤ min(iat + ttl, parent exp,
    policy exp) (`widen-expiry`), then ⊑ the template term by term, its
    depth at most the template's. SPEC (jcp.md §6): in that order."""
    t = pol["template"]
    bound = min(child["iat"] + t["ttl"], held["exp"], pol["exp"])
    if child["exp"] > bound:
        raise Reject("widen-expiry", at(where, "exp"), "past min(iat + ttl, parent exp, policy exp) = %d" % bound)
    w = attenuation(terms_of(child.p), terms_of(t, exp=bound), depth="template")
    if w:
        raise Reject(w[0], at(where, w[1]), "wider than the policy's template")


def link(parent, pol, g, where):
    """SPEC (jcp.md §4 step 3-4, and §7 admit): grant g follows grant
    `parent`, through the mint policy `pol` standing before it (None if
    none), in this order: g's parent is `parent` (`broken-chain`); without
    `policy`: no policy before it (`broken-chain`), g's iss is the parent's
    aud (`wrong-issuer`); with `policy`: it is the policy before it
    (`broken-chain`), the policy holds `parent` (`broken-chain`), the
    policy's iss is the parent's aud (`wrong-issuer`), the policy within
    the parent (§6), g's iss the minter (`wrong-issuer`), g's aud the
    policy's `to` (`wrong-audience`), g within the template (§6); then
    g ⊑ parent (§3.2)."""
    if g.get("parent") != parent.id:
        raise Reject("broken-chain", at(where, "parent"), "not the id of the grant before it")
    if "policy" not in g:
        if pol is not None:
            raise Reject("broken-chain", at(where, "policy"), "a mint policy precedes a grant not minted under it")
        if g["iss"] != parent["aud"]:
            raise Reject("wrong-issuer", at(where, "iss"), "not the previous grant's aud")
    else:
        if pol is None or pol.id != g["policy"]:
            raise Reject("broken-chain", at(where, "policy"), "not the mint policy just before it")
        if pol["grant"] != parent.id:
            raise Reject("broken-chain", at(where, "policy.grant"), "the policy holds another grant")
        if pol["iss"] != parent["aud"]:
            raise Reject("wrong-issuer", at(where, "policy.iss"), "not the previous grant's aud")
        check_policy_bounds(pol, parent, at(where, "policy"))
        if g["iss"] != pol["minter"]:
            raise Reject("wrong-issuer", at(where, "iss"), "not the policy's minter")
        if g["aud"] != pol["to"]:
            raise Reject("wrong-audience", at(where, "aud"), "not the policy's to")
        check_minted(g, pol, parent, where)
    w = attenuation(terms_of(g.p), terms_of(parent.p))
    if w:
        raise Reject(w[0], at(where, w[1]), "wider than its parent")


# =============================================================================
# Chains (§4)
# =============================================================================
TIME_SKEW = 300


def verify_chain(elems, roots, now):
    """§4: open and check a chain [G0, (P,) G1, ...] of envelope bytes under
    the trusted root keys `roots` at time `now` (None: no time checks).
    Returns the opened tokens. SPEC (jcp.md §4, now written out; this
    verifier first read it step by step): 1-64 elements (`chain-depth`),
    then element by element, refusing at the first failure: it opens (§2);
    a grant's or policy's times (`expired`, `not-yet`); a policy first or
    after a policy is `invalid`, an element neither grant nor policy
    `invalid`; the first grant has no parent (`broken-chain`) and a trusted
    issuer (`untrusted-root`); every other grant follows the grant before
    it (`link`). A chain that ends with a policy is `broken-chain`."""
    if not 1 <= len(elems) <= 64:
        raise Reject("chain-depth", "chain", "%d elements, not 1-64" % len(elems))
    toks, grants, pol = [], [], None
    for i, b in enumerate(elems):
        t = open_token(b, "chain[%d]" % i)
        toks.append(t)
        if now is not None and t.kind in ("grant", "policy"):
            if not t["exp"] > now:
                raise Reject("expired", at(t.where, "exp"), "exp %d ≤ now %d" % (t["exp"], now))
            if not t["iat"] <= now + TIME_SKEW:
                raise Reject("not-yet", at(t.where, "iat"), "iat %d > now + %d" % (t["iat"], TIME_SKEW))
        if t.kind == "policy":
            if pol is not None or i == 0:
                raise Reject("invalid", t.where, "a mint policy stands after a grant, just before the grant minted under it")
            pol = t
            continue
        if t.kind != "grant":
            raise Reject("invalid", t.where, "an object of kind %s, not a grant or mint policy" % t.kind)
        if i == 0:
            if "parent" in t:
                raise Reject("broken-chain", at(t.where, "parent"), "the root has a parent")
            if t["iss"] not in roots:
                raise Reject("untrusted-root", at(t.where, "iss"), "ed25519:%s is not a trusted root" % t["iss"].hex())
        else:
            link(grants[-1], pol, t, t.where)
        grants.append(t)
        pol = None
    if pol is not None:
        raise Reject("broken-chain", "chain", "ends with a mint policy; a chain ends with the grant presented")
    return toks


# =============================================================================
# Canonical JSON (canonical.md) for ledger lines
# =============================================================================
def _jcs_string(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
        elif o < 0x20:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(v):
    """RFC 8785 text of a value of integers, strings, bools, null, lists and
    objects (members sorted by the UTF-16 code units of their names)."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _jcs_string(v)
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    items = sorted(v.items(), key=lambda kv: kv[0].encode("utf-16-be"))
    return "{" + ",".join(_jcs_string(k) + ":" + jcs(x) for k, x in items) + "}"


def parse_canonical_json(raw, where):
    """canonical.md's JSON rules, refusing with its codes: `malformed`,
    `truncated`, `duplicate-key`, `float`, `int-range`, `non-canonical`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Reject("malformed", where, "not UTF-8")

    def pairs(ps):
        d = {}
        for k, v in ps:
            if k in d:
                raise Reject("duplicate-key", where, "member %r twice" % k)
            d[k] = v
        return d

    def floats(s):
        raise Reject("float", where, s)

    def const(s):
        raise Reject("malformed", where, s)
    try:
        v = json.loads(text, object_pairs_hook=pairs, parse_float=floats, parse_constant=const)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":
            raise Reject("non-canonical", where, "bytes after the value at %d" % e.pos)
        if e.pos >= len(text) or e.msg.startswith("Unterminated"):
            raise Reject("truncated", where, "ends inside a value")
        raise Reject("malformed", where, "%s at %d" % (e.msg, e.pos))
    except RecursionError:
        raise Reject("malformed", where, "nested too deep")

    def walk(x, depth):
        if depth > 64:
            raise Reject("malformed", where, "nested more than 64 deep")
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2 ** 53:
            raise Reject("int-range", where, str(x))
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise Reject("malformed", where, "a lone surrogate")
        if isinstance(x, dict):
            for k, y in x.items():
                walk(k, depth)
                walk(y, depth + 1)
        if isinstance(x, list):
            for y in x:
                walk(y, depth + 1)
    walk(v, 1)
    if jcs(v) != text:
        raise Reject("non-canonical", where, "not its RFC 8785 form")
    return v


def b64url(s, where):
    """Base64url without padding, strictly (the one spelling of the bytes)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if not isinstance(s, str) or any(c not in alphabet for c in s) or len(s) % 4 == 1:
        raise Reject("invalid", where, "not base64url without padding")
    b = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if base64.urlsafe_b64encode(b).decode().rstrip("=") != s:
        raise Reject("invalid", where, "not the canonical base64url of its bytes")
    return b


def b3(s, where, zero_ok=False):
    """addresses.md text form: `b3:` + 64 lower-case hex; all-zero names
    nothing (`missing-field`, canonical.md). SPEC (jcp.md §7): in a ledger
    line the all-zero id is an id like any other (in a path it names no
    admitted grant; as `inv` or `run` it is not refused)."""
    if not isinstance(s, str) or len(s) != 67 or not s.startswith("b3:") or \
            any(c not in "0123456789abcdef" for c in s[3:]):
        raise Reject("invalid", where, "not b3: + 64 lower-case hex digits")
    b = bytes.fromhex(s[3:])
    if b == bytes(32) and not zero_ok:
        raise Reject("missing-field", where, "the all-zero address names nothing")
    return b


def parse_key(s):
    """keys.md text form `ed25519:` + 64 lower-case hex; weak keys refused."""
    if not isinstance(s, str) or len(s) != 72 or not s.startswith("ed25519:") or \
            any(c not in "0123456789abcdef" for c in s[8:]):
        raise Reject("invalid", "key", "%r is not ed25519: + 64 lower-case hex digits" % (s,))
    k = bytes.fromhex(s[8:])
    check_key(k, "key %s" % s)
    return k


def hexid(b):
    return "b3:" + b.hex()


# =============================================================================
# The ledger (§7), amendments (§8) and the gate (§5)
# =============================================================================
LEDGER_OPS = {
    "admit": ["token"],
    "reserve": ["n", "path", "uj", "inv", "at", "until"],
    "post": ["n", "uj", "run"],
    "release": ["n", "why"],
    "revoke": ["token"],
    "amend": ["token"],
    "mint": ["token", "event", "at"],
    "checkpoint": ["token"],
}


def _ns(v, where):
    """A time in ns. canonical.md: counters that can reach 2^53 (nanosecond
    times) are carried as strings in JSON records. SPEC (jcp.md §7): `at`
    and `until` are decimal strings (`"1700000000000000000"`), no sign, no
    leading zero (this verifier's first reading)."""
    if not isinstance(v, str) or not v.isascii() or not v.isdigit() or (v[0] == "0" and v != "0"):
        raise Reject("invalid", where, "not a time in ns as a decimal string")
    return int(v)


def _uj(v, where):
    """An energy map class -> µJ. SPEC (jcp.md §7): µJ are JSON integers,
    below 2^53 (canonical.md's int-range; this verifier's first reading)."""
    if not isinstance(v, dict):
        raise Reject("invalid", where, "not a map class → µJ")
    out = {}
    for k, x in v.items():
        if k not in CLASSES:
            raise Reject("invalid", "%s.%s" % (where, k), "not a device class")
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise Reject("invalid", "%s.%s" % (where, k), "not a number of µJ")
        out[k] = x
    return out


class Ledger:
    """The replayed state of a budget ledger (§7): tokens admitted (grants and
    mint policies, by id), reservations, revocations, amendments, mints."""

    def __init__(self, roots):
        self.roots = set(roots)
        self.head = blake3(b"sandbox.jcp-ledger/1")
        self.size = 0
        self.tokens = {}        # id -> Token (grants and policies), in admit order
        self.revoked = set()    # ids
        self.amended = {}       # grant id -> (seq, amendment Token)
        self.checkpoints = {}   # grant id -> last seq
        self.resv = {}          # n -> dict(path, uj, at, inv, state, post, why)
        self.invs = set()
        self.mints = {}         # policy id -> [at, ...] of its mints (rate)
        self.children = {}      # policy id -> grants admitted or minted under it (max)

    # ---- what replay consults ------------------------------------------------
    def effective(self, g):
        """§8: a grant's effective terms: its last amendment's, else its own."""
        t = terms_of(g.p)
        if g.id in self.amended:
            a = self.amended[g.id][1]
            t.update(images=a["images"], ceilings=a["ceilings"], exp=a["exp"], caveats=a["caveats"])
        return t

    def ancestors(self, g):
        """g's ancestors among admitted grants, parent first."""
        out = []
        while "parent" in g and g["parent"] in self.tokens:
            g = self.tokens[g["parent"]]
            out.append(g)
        return out

    def is_revoked(self, g):
        """§7 revoke: the grant and its descendants are refused. SPEC (jcp.md
        §7): a revoked mint policy revokes the grants minted under it and
        their descendants (so a grant is revoked when it, an ancestor, or the
        policy one of them was minted under is)."""
        if g.kind == "policy":
            return g.id in self.revoked or self.is_revoked(self.tokens[g["grant"]])
        return any(x.id in self.revoked or x.get("policy") in self.revoked for x in [g] + self.ancestors(g))

    def counted(self, gid):
        """The reservations under grant gid and its descendants that count for
        `runs` and `rate`: those on whose path it is, but those released
        `refused` (§7)."""
        return [r for r in self.resv.values()
                if gid in r["path"] and not (r["state"] == "released" and r["why"] == "refused")]

    def budget(self, g, cls):
        """§7: (ceiling, reserved, spent, remaining) of grant g for a class."""
        ceiling = self.effective(g)["ceilings"].get(cls, 0)
        reserved = sum(r["uj"].get(cls, 0) for r in self.resv.values() if g.id in r["path"] and r["state"] == "open")
        spent = sum(r["post"].get(cls, 0) for r in self.resv.values() if g.id in r["path"] and r["state"] == "posted")
        return ceiling, reserved, spent, max(0, ceiling - reserved - spent)

    def check_counts(self, g, at_ns, where):
        """`runs` and `rate` of grant g for one more reservation at `at_ns`.
        SPEC (jcp.md §3.1, §7): "in the last `per` seconds" is the window
        (at − per s, at]; `runs` counts every earlier counted reservation
        (this verifier's first reading)."""
        cav = self.effective(g)["caveats"]
        rs = self.counted(g.id)
        if "runs" in cav and not len(rs) < cav["runs"]:
            raise Reject("runs-exhausted", at(where, hexid(g.id) + ".caveats.runs"),
                         "%d runs reserved, the grant allows %d" % (len(rs), cav["runs"]))
        if "rate" in cav:
            n, per = cav["rate"]["n"], cav["rate"]["per"]
            recent = [r for r in rs if at_ns - per * 10 ** 9 < r["at"] <= at_ns]
            if not len(recent) < n:
                raise Reject("rate-exceeded", at(where, hexid(g.id) + ".caveats.rate"),
                             "%d runs in the last %d s, the grant allows %d" % (len(recent), per, n))

    # ---- replay ----------------------------------------------------------------
    def replay(self, data):
        """Replay a whole ledger file: one canonical JSON entry a line, each
        ending with a newline. Refuses the first entry that breaks a rule,
        naming its line."""
        if data and not data.endswith(b"\n"):
            # SPEC (jcp.md §7): a final fragment without its newline is
            # `truncated` (this verifier's first reading).
            raise Reject("truncated", "line[%d]" % (data.count(b"\n") + 1), "the last line has no newline")
        for n, line in enumerate(data.split(b"\n")[:-1], 1):
            self.apply(line, n)

    def apply(self, raw, n):
        """One entry (its bytes without the newline) at line n."""
        where = "line[%d]" % n
        if not raw:
            raise Reject("malformed", where, "an empty line")
        e = parse_canonical_json(raw, where)
        if not isinstance(e, dict):
            raise Reject("invalid", where, "not an object")
        if "op" not in e:
            raise Reject("missing-field", at(where, "op"), "required")
        op = e["op"]
        if op not in LEDGER_OPS:
            raise Reject("invalid", at(where, "op"), "%r is not a ledger op" % (op,))
        for k in e:
            if k != "op" and k not in LEDGER_OPS[op]:
                raise Reject("unknown-field", at(where, k), "not a member of %s" % op)
        for k in LEDGER_OPS[op]:
            if k not in e:
                raise Reject("missing-field", at(where, k), "required")
        getattr(self, "op_" + op)(e, where)
        self.head = blake3(self.head + raw)
        self.size += 1

    def _open(self, e, where, kinds):
        t = open_token(b64url(e["token"], at(where, "token")), at(where, "token"))
        if t.kind not in kinds:
            raise Reject("invalid", at(where, "token"), "an object of kind %s where a %s belongs" % (t.kind, " or ".join(kinds)))
        return t

    def _admit_grant(self, g, where):
        """§7 admit of a grant: a trusted root issuer, or §4 step 3-4 against
        its admitted parent (no time checks). SPEC (jcp.md §7): a grant
        minted under a policy may be admitted too, checked like a chain
        [.., parent, policy, g] with the admitted policy, and it counts
        toward the policy's `max` (`runs-exhausted`), not its rate."""
        if "parent" not in g:
            if g["iss"] not in self.roots:
                raise Reject("untrusted-root", at(where, "iss"), "ed25519:%s is not a trusted root" % g["iss"].hex())
            return
        parent = self.tokens.get(g["parent"])
        if parent is None or parent.kind != "grant":
            raise Reject("broken-chain", at(where, "parent"), "not an admitted grant")
        pol = None
        if "policy" in g:
            pol = self.tokens.get(g["policy"])
            if pol is None or pol.kind != "policy":
                raise Reject("broken-chain", at(where, "policy"), "not an admitted mint policy")
        link(parent, pol, g, where)
        if pol is not None:
            self._check_max(pol, where)

    def _check_max(self, pol, where):
        if not self.children.get(pol.id, 0) < pol["max"]:
            raise Reject("runs-exhausted", at(where, "policy"), "the policy's max of %d children is spent" % pol["max"])

    def admit_token(self, t, where):
        """The gate admits a chain's tokens it has not seen (§5)."""
        if t.id in self.tokens:
            return
        if t.kind == "grant":
            self._admit_grant(t, where)
            if "policy" in t:
                self.children[t["policy"]] = self.children.get(t["policy"], 0) + 1
        else:
            held = self.tokens.get(t["grant"])
            if held is None or held.kind != "grant":
                raise Reject("broken-chain", at(where, "grant"), "not an admitted grant")
            if t["iss"] != held["aud"]:
                raise Reject("wrong-issuer", at(where, "iss"), "not the held grant's aud")
            check_policy_bounds(t, held, where)
        self.tokens[t.id] = t

    def op_admit(self, e, where):
        t = self._open(e, where, ("grant", "policy"))
        if t.id in self.tokens:
            # SPEC (jcp.md §7): a token admitted twice is `invalid`.
            raise Reject("invalid", at(where, "token"), "admitted before")
        if t.kind == "grant":
            self._admit_grant(t, at(where, "token"))
            if "policy" in t:
                self.children[t["policy"]] = self.children.get(t["policy"], 0) + 1
        else:
            held = self.tokens.get(t["grant"])
            if held is None or held.kind != "grant":
                raise Reject("broken-chain", at(where, "token.grant"), "not an admitted grant")
            if t["iss"] != held["aud"]:
                raise Reject("wrong-issuer", at(where, "token.iss"), "not the held grant's aud")
            check_policy_bounds(t, held, at(where, "token"))
        self.tokens[t.id] = t

    def op_reserve(self, e, where):
        """SPEC (jcp.md §7 reserve), in this order: the members' syntax; `n`
        the next number (`invalid`); `uj` at least one class, none 0
        (`invalid`); the path: at least one grant, each admitted, each the
        parent of the one before, the last a root (`broken-chain`); no grant
        of it revoked (`revoked`); `inv` not seen before (`replay`); then
        over the path, leaf first, one rule over the whole path before the
        next: every class of `uj` has a ceiling (`class-not-granted`), runs
        and rate (`runs-exhausted`, `rate-exceeded`), the ceilings
        (`over-ceiling`)."""
        if not isinstance(e["path"], list):
            raise Reject("invalid", at(where, "path"), "not an array")
        path = [b3(x, "%s.path[%d]" % (where, i), zero_ok=True) for i, x in enumerate(e["path"])]
        uj = _uj(e["uj"], at(where, "uj"))
        inv = b3(e["inv"], at(where, "inv"), zero_ok=True)
        at_ns, until = _ns(e["at"], at(where, "at")), _ns(e["until"], at(where, "until"))
        n = e["n"]
        if not isinstance(n, int) or isinstance(n, bool) or n != len(self.resv) + 1:
            raise Reject("invalid", at(where, "n"), "not the next reservation number %d" % (len(self.resv) + 1))
        if not uj:
            raise Reject("invalid", at(where, "uj"), "a reservation reserves at least one class")
        for c in CLASSES:
            if c in uj and uj[c] == 0:
                raise Reject("invalid", at(where, "uj." + c), "a reservation of 0 µJ: leave the class out")
        if not path:
            raise Reject("broken-chain", at(where, "path"), "no grant")
        grants = []
        for i, gid in enumerate(path):
            g = self.tokens.get(gid)
            if g is None or g.kind != "grant":
                raise Reject("broken-chain", "%s.path[%d]" % (where, i), "not an admitted grant")
            if i > 0 and grants[-1].get("parent") != gid:
                raise Reject("broken-chain", "%s.path[%d]" % (where, i), "not the parent of path[%d]" % (i - 1))
            grants.append(g)
        if "parent" in grants[-1]:
            raise Reject("broken-chain", "%s.path[%d]" % (where, len(path) - 1), "not a root")
        for i, g in enumerate(grants):
            if self.is_revoked(g):
                raise Reject("revoked", "%s.path[%d]" % (where, i), "%s is revoked" % hexid(g.id))
        if inv in self.invs:
            raise Reject("replay", at(where, "inv"), "an invocation seen before")
        self.check_reserve(grants, uj, at_ns, where)
        self.invs.add(inv)
        self.resv[n] = {"path": path, "uj": uj, "at": at_ns, "until": until, "inv": inv,
                        "state": "open", "post": {}, "why": None}

    def check_reserve(self, grants, uj, at_ns, where):
        """The rules of a reservation over its path (leaf first): classes,
        then counts, then ceilings, each over the whole path first."""
        for g in grants:
            eff = self.effective(g)
            for c in CLASSES:
                if c in uj and c not in eff["ceilings"]:
                    raise Reject("class-not-granted", "%s.%s.ceilings.%s" % (where, hexid(g.id), c), "no ceiling")
        for g in grants:
            self.check_counts(g, at_ns, where)
        for g in grants:
            for c in CLASSES:
                if c in uj:
                    ceiling, reserved, spent, _ = self.budget(g, c)
                    if reserved + spent + uj[c] > ceiling:
                        raise Reject("over-ceiling", "%s.%s.ceilings.%s" % (where, hexid(g.id), c),
                                     "reserved %d + spent %d + %d > ceiling %d" % (reserved, spent, uj[c], ceiling))

    def _open_resv(self, e, where):
        if not isinstance(e["n"], int) or isinstance(e["n"], bool):
            raise Reject("invalid", at(where, "n"), "not a reservation number")
        r = self.resv.get(e["n"])
        # SPEC (jcp.md §7): a number never reserved is no open reservation:
        # `double-spend` (this verifier's first reading).
        if r is None or r["state"] != "open":
            raise Reject("double-spend", at(where, "n"), "reservation %r is not open" % (e["n"],))
        return r

    def op_post(self, e, where):
        r = self._open_resv(e, where)
        uj = _uj(e["uj"], at(where, "uj"))
        b3(e["run"], at(where, "run"), zero_ok=True)
        r["state"], r["post"] = "posted", uj

    def op_release(self, e, where):
        r = self._open_resv(e, where)
        if e["why"] not in ("refused", "failed", "expired"):
            raise Reject("invalid", at(where, "why"), "not refused, failed or expired")
        r["state"], r["why"] = "released", e["why"]

    def op_revoke(self, e, where):
        t = self._open(e, where, ("revocation",))
        g = self.tokens.get(t["grant"])
        if g is None:
            # SPEC (jcp.md §7): revoking what was not admitted is
            # `broken-chain` (this verifier's first reading).
            raise Reject("broken-chain", at(where, "token.grant"), "not an admitted grant")
        issuers = [g["iss"]]
        if g.kind == "policy":
            held = self.tokens[g["grant"]]
            issuers += [held["iss"]] + [a["iss"] for a in self.ancestors(held)]
        else:
            issuers += [a["iss"] for a in self.ancestors(g)]
        if t["iss"] not in issuers:
            raise Reject("wrong-issuer", at(where, "token.iss"), "issued neither the grant nor an ancestor")
        self.revoked.add(g.id)

    def op_amend(self, e, where):
        t = self._open(e, where, ("amendment",))
        g = self.tokens.get(t["grant"])
        if g is None or g.kind != "grant":
            raise Reject("broken-chain", at(where, "token.grant"), "not an admitted grant")
        self.amend(g, t, at(where, "token"))

    def amend(self, g, a, where):
        """§8: an amendment `a` of grant `g`: by g's issuer, who is not its
        audience (`amend-not-issuer`); `seq` above every earlier one
        (`amend-stale`); new terms ⊑ the current effective terms, depth
        excluded (`amend-widens` at the term)."""
        if a["iss"] != g["iss"] or g["iss"] == g["aud"]:
            raise Reject("amend-not-issuer", at(where, "iss"), "not the grant's issuer, or the issuer is its audience")
        last = self.amended.get(g.id, (0, None))[0]
        if a["seq"] <= last:
            raise Reject("amend-stale", at(where, "seq"), "seq %d, not above %d" % (a["seq"], last))
        w = attenuation(terms_of(a.p), self.effective(g), depth=None)
        if w:
            raise Reject("amend-widens", at(where, w[1]), "%s: wider than the effective terms" % w[0])
        self.amended[g.id] = (a["seq"], a)

    def op_mint(self, e, where):
        """SPEC (jcp.md §7 mint), in this order: the child names a policy
        (`broken-chain`) that was admitted (`broken-chain`); the child was
        not admitted before (`invalid`); neither the policy nor the grant it
        holds is revoked (`revoked`); the child follows the held grant
        through the policy (§4 step 3-4); `event` is one of the policy's
        `events` (`invalid`); `max` (`runs-exhausted`: children admitted or
        minted); `rate` (`rate-exceeded`: mints by `at`, in (at − per, at])."""
        g = self._open(e, where, ("grant",))
        if not isinstance(e["event"], str):
            raise Reject("invalid", at(where, "event"), "not a text")
        at_ns = _ns(e["at"], at(where, "at"))
        w = at(where, "token")
        if "policy" not in g:
            raise Reject("broken-chain", at(w, "policy"), "a minted grant cites its policy")
        pol = self.tokens.get(g["policy"])
        if pol is None or pol.kind != "policy":
            raise Reject("broken-chain", at(w, "policy"), "not an admitted mint policy")
        if g.id in self.tokens:
            raise Reject("invalid", w, "admitted before")
        if self.is_revoked(pol):
            raise Reject("revoked", at(w, "policy"), "the policy or the grant it holds is revoked")
        link(self.tokens[pol["grant"]], pol, g, w)
        if e["event"] not in pol["events"]:
            raise Reject("invalid", at(where, "event"), "%r is not one of the policy's events" % e["event"])
        self._check_max(pol, w)
        done = self.mints.get(pol.id, [])
        n, per = pol["rate"]["n"], pol["rate"]["per"]
        if not len([x for x in done if at_ns - per * 10 ** 9 < x <= at_ns]) < n:
            raise Reject("rate-exceeded", at(w, "policy"), "%d mints in %d s" % (n, per))
        self.mints.setdefault(pol.id, []).append(at_ns)
        self.children[pol.id] = self.children.get(pol.id, 0) + 1
        self.tokens[g.id] = g

    def op_checkpoint(self, e, where):
        t = self._open(e, where, ("checkpoint",))
        g = self.tokens.get(t["grant"])
        if g is None or g.kind != "grant":
            raise Reject("broken-chain", at(where, "token.grant"), "not an admitted grant")
        if t["iss"] != g["aud"]:
            raise Reject("wrong-audience", at(where, "token.iss"), "not the grant's aud")
        if t["seq"] <= self.checkpoints.get(g.id, 0):
            raise Reject("invalid", at(where, "token.seq"), "not increasing")
        self.checkpoints[g.id] = t["seq"]


def parse_destination(s, where):
    """A run's network grant `HOST:PORT` or `[IPv6]:PORT` (grants.md): a
    name or an address, with its port. SPEC (jcp.md § Vectors)."""
    hp = _split_port(s) if isinstance(s, str) else None
    if hp is None or hp[1] is None:
        raise Reject("invalid", where, "%r is not a destination HOST:PORT" % (s,))
    host, port, _ = hp
    try:
        return ("ip", ipaddress.ip_address(host), port)
    except ValueError:
        pass
    if not _dns_name(host):
        raise Reject("invalid", where, "%r is not a destination HOST:PORT" % (s,))
    return ("dns", host, port)


def gate(toks, inv_raw, ask, now, ledger):
    """§5: decide a run presented with an opened, verified chain `toks`, an
    invocation and an ask {image, tier, classes, hosts, paths, model},
    against a ledger. Returns the budget to reserve. SPEC (jcp.md §5, now
    written out; this verifier first read it step by step across grants):
    the invocation (opened after the chain; its grant, then its issuer,
    then its time), the invocation's image against the run's, then grant
    by grant, root first, every check of §5 steps 1-6 on one grant before
    the next; then the reservation (§7: revoked, replay by the
    invocation's id, then classes, counts and ceilings over the path, leaf
    first)."""
    grants = [t for t in toks if t.kind == "grant"]
    gn = grants[-1]
    inv = open_token(inv_raw, "invocation")
    if inv.kind != "invocation":
        raise Reject("invalid", "invocation", "a %s, not an invocation" % inv.kind)
    if inv["grant"] != gn.id:
        raise Reject("broken-chain", "invocation.grant", "not the id of the last grant")
    if inv["iss"] != gn["aud"]:
        raise Reject("wrong-audience", "invocation.iss", "not the last grant's aud")
    if abs(inv["iat"] - now) > TIME_SKEW:
        raise Reject("stale-invocation", "invocation.iat", "iat %d is not within %d s of %d" % (inv["iat"], TIME_SKEW, now))
    tier = ask.get("tier")
    classes = ask.get("classes", {})
    for c, v in classes.items():
        if c not in CLASSES or not _is_uint(v):
            raise Reject("invalid", "ask.classes." + c, "not a device class with a budget in µJ")
    dests = [parse_destination(h, "ask.hosts") for h in ask.get("hosts", [])]
    paths = ask.get("paths", [])
    # SPEC (jcp.md §5): the run's image is the ask's (the unit's); the
    # invocation's, when it names one, must be it.
    image = b3(ask["image"], "ask.image")
    if "image" in inv and image != inv["image"]:
        raise Reject("image-not-granted", "invocation.image", "the run's image is not the invocation's")
    # SPEC (jcp.md §5 step 3): the model is the invocation's `model` alone
    # (absent: the run names none); the ask's repeats it and is not read.
    model = inv.get("model")
    for t in toks:
        ledger.admit_token(t, "admit")
    for g in grants:
        eff = ledger.effective(g)
        gid = hexid(g.id)
        if ledger.is_revoked(g):
            raise Reject("revoked", gid, "revoked, or an ancestor is")
        if not eff["exp"] > now:
            raise Reject("expired", at(g.where, "exp"), "expired (an amendment brought its expiry forward)")
        if image not in eff["images"]:
            raise Reject("image-not-granted", gid + ".images", "the image is not granted")
        cav = eff["caveats"]
        if "models" in cav and model not in cav["models"]:
            raise Reject("model-not-granted", gid + ".caveats.models", "model %r" % (model,))
        if "tiers" in cav and tier not in cav["tiers"]:
            raise Reject("tier-not-granted", gid + ".caveats.tiers", "tier %r" % (tier,))
        if "hosts" in cav:
            pats = [parse_pattern(h) for h in cav["hosts"]]
            for h, d in zip(ask.get("hosts", []), dests):
                if not any(covers_destination(p, d) for p in pats):
                    raise Reject("host-not-granted", gid + ".caveats.hosts", h)
        if "paths" in cav:
            for p in paths:
                if not any(path_below(p, q) for q in cav["paths"]):
                    raise Reject("path-not-granted", gid + ".caveats.paths", p)
        for c in CLASSES:
            if c not in classes:
                continue
            if c not in eff["ceilings"]:
                raise Reject("class-not-granted", "%s.ceilings.%s" % (gid, c), "no ceiling")
            # SPEC (jcp.md §5 step 6): a declared budget of 0 is no budget.
            if not classes[c]:
                raise Reject("ceiling-undeclared", "run.grants.compute." + c, "no budget declared")
    uj = {c: classes[c] for c in CLASSES if c in classes}
    if not uj:
        raise Reject("invalid", "uj", "a reservation reserves at least one class")
    path = list(reversed(grants))
    for i, g in enumerate(path):
        if ledger.is_revoked(g):
            raise Reject("revoked", "path[%d]" % i, "%s is revoked" % hexid(g.id))
    if inv.id in ledger.invs:
        raise Reject("replay", "inv", "an invocation the ledger has seen")
    ledger.check_reserve(path, uj, now * 10 ** 9, "")
    return uj


# =============================================================================
# Cases and the command line
# =============================================================================
def run_case(case, roots, now):
    """The outcome of one case of a vectors file: "ok", or raises Reject."""
    kind = case["kind"]
    if kind in ("chain", "decision", "amendment", "mint"):
        elems = [b64url(s, "chain[%d]" % i) for i, s in enumerate(case.get("chain", []))]
        toks = verify_chain(elems, roots, now)
        if kind == "decision":
            gate(toks, b64url(case["invocation"], "invocation"), case.get("ask", {}), now, Ledger(roots))
        elif kind == "amendment":
            ledger = Ledger(roots)
            last = [t for t in toks if t.kind == "grant"][-1]
            for i, s in enumerate(case.get("amendments", [])):
                w = "amendments[%d]" % i
                a = open_token(b64url(s, w), w)
                if a.kind != "amendment":
                    raise Reject("invalid", w, "a %s, not an amendment" % a.kind)
                if a["grant"] != last.id:
                    raise Reject("broken-chain", at(w, "grant"), "not the id of the chain's last grant")
                ledger.amend(last, a, w)
        return "ok"
    if kind == "ledger":
        ledger = Ledger(roots)
        for n, line in enumerate(case.get("ledger", []), 1):
            ledger.apply(line.encode("utf-8"), n)
        return "ok"
    raise Reject("invalid", "case", "unknown kind %r" % (kind,))


def check_vectors(path, blake3_vectors):
    """--vectors: every case, one line each; exit 1 if any disagrees."""
    runrecord.check_blake3(blake3_vectors)
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    if doc.get("type") != "sandbox.jcp-vectors/1":
        sys.exit("%s: type %r, not sandbox.jcp-vectors/1" % (path, doc.get("type")))
    roots = [parse_key(k) for k in doc.get("roots", [])]
    now = doc["now"]
    bad = 0
    for case in doc["cases"]:
        want = case["expect"]
        try:
            got, where = run_case(case, roots, now), ""
        except Reject as e:
            got, where = e.code, " at %s: %s" % (e.where, e.detail)
        agree = got == want
        bad += not agree
        print("%s  %-11s %s: got %s%s%s" % ("ok  " if agree else "FAIL", case["kind"], case["name"], got,
                                             "" if agree else ", want %s" % want, where if got != "ok" else ""))
    print("%d cases, %d disagree" % (len(doc["cases"]), bad))
    return 1 if bad else 0


def read_chain(path):
    """A chain file: a JSON array of base64url envelopes, or {"chain": [...]}."""
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    if isinstance(doc, dict):
        doc = doc["chain"]
    return [b64url(s, "chain[%d]" % i) for i, s in enumerate(doc)]


def main(argv):
    self_check()
    args = argv[1:]
    opts = {"--root": []}
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--chain", "--ledger", "--now", "--vectors"):
            if i + 1 >= len(args):
                sys.exit(__doc__)
            opts[a] = args[i + 1]
            i += 2
        elif a == "--root":
            if i + 1 >= len(args):
                sys.exit(__doc__)
            opts["--root"].append(args[i + 1])
            i += 2
        else:
            rest.append(a)
            i += 1
    try:
        if "--vectors" in opts:
            b3v = rest[0] if rest else DEFAULT_BLAKE3_VECTORS
            return check_vectors(opts["--vectors"], b3v)
        if os.path.exists(DEFAULT_BLAKE3_VECTORS):
            runrecord.check_blake3(DEFAULT_BLAKE3_VECTORS)
        roots = [parse_key(k) for k in opts["--root"]]
        if "--chain" in opts and "--now" in opts:
            try:
                toks = verify_chain(read_chain(opts["--chain"]), roots, int(opts["--now"]))
            except Reject as e:
                print("refused: %s" % e)
                return 1
            print("ok")
            for t in toks:
                print("  %s %s iss ed25519:%s" % (t.kind, hexid(t.id), t["iss"].hex()))
            return 0
        if "--ledger" in opts:
            with open(opts["--ledger"], "rb") as f:
                data = f.read()
            ledger = Ledger(roots)
            try:
                ledger.replay(data)
            except Reject as e:
                print("refused: %s" % e)
                return 1
            for t in ledger.tokens.values():
                if t.kind != "grant":
                    continue
                flags = " revoked" if ledger.is_revoked(t) else ""
                print("grant %s%s" % (hexid(t.id), flags))
                for c in CLASSES:
                    if c in ledger.effective(t)["ceilings"]:
                        print("  %-8s ceiling %d reserved %d spent %d remaining %d" % ((c,) + ledger.budget(t, c)))
            print("ok: %d entries, head %s" % (ledger.size, hexid(ledger.head)))
            return 0
    except Reject as e:
        print("refused: %s" % e)
        return 1
    except (OSError, ValueError, KeyError) as e:
        sys.exit("jcp.py: %s" % e)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
