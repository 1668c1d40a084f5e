"""The primitives a sealed run is verified with, in pure Python (standard
library only): BLAKE3 (hash mode, with its extendable output), Ed25519
verification (RFC 8032, with docs/spec/keys.md's strict checks), strict
core-deterministic CBOR (RFC 8949 §4.2.1, the refusal codes of
docs/spec/canonical.md) and RFC 8785 JSON canonicalization (JCS).

Adapted from the project's independent verifiers
(conformance/independent/runrecord.py and jcp.py: same project, same
licence). :func:`self_check` runs them against official vectors: RFC 8032
§7.1 tests 1-3, the addresses of docs/spec/addresses.md, the key id of
docs/spec/keys.md and, given the files, the BLAKE3 team's test vectors and
the cyberphone JCS vectors. Nothing here signs: a verifier needs no
secret.

These are plain Python big-integer and word arithmetic: correct, not
fast (BLAKE3 hashes roughly a megabyte a second; an Ed25519 verification
takes a few milliseconds) and not meant for secrets.
"""

import decimal
import hashlib
import json
import math
import os
import struct

__all__ = [
    "Refusal", "blake3", "address", "ed25519_verify", "check_key", "parse_key",
    "cbor_decode", "cbor_decode_prefix", "cbor_encode", "CBORTag", "jcs",
    "parse_canonical_json", "b64url_decode", "self_check",
]


class Refusal(Exception):
    """Bytes refused by a check: ``code`` is the specification's refusal
    code (``signature``, ``weak-key``, ``non-canonical``, ``address``, ...),
    ``where`` what was being read, ``detail`` why, for people."""

    def __init__(self, code, where, detail=""):
        msg = "%s: %s" % (code, where) + (": " + detail if detail else "")
        super().__init__(msg)
        self.code, self.where, self.detail = code, where, detail


# =============================================================================
# BLAKE3 (hash mode), from the BLAKE3 paper
# =============================================================================
_IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
_PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
_CHUNK_START, _CHUNK_END, _PARENT, _ROOT = 1, 2, 4, 8
_M32 = 0xFFFFFFFF


def _compress(cv, m, counter, blen, flags, full=False):
    s = cv[:] + _IV[:4] + [counter & _M32, (counter >> 32) & _M32, blen, flags]
    m = m[:]
    for r in range(7):
        for a, b, c, d, i in ((0, 4, 8, 12, 0), (1, 5, 9, 13, 2), (2, 6, 10, 14, 4), (3, 7, 11, 15, 6),
                              (0, 5, 10, 15, 8), (1, 6, 11, 12, 10), (2, 7, 8, 13, 12), (3, 4, 9, 14, 14)):
            x, y = m[i], m[i + 1]
            s[a] = (s[a] + s[b] + x) & _M32
            v = s[d] ^ s[a]
            s[d] = ((v >> 16) | (v << 16)) & _M32
            s[c] = (s[c] + s[d]) & _M32
            v = s[b] ^ s[c]
            s[b] = ((v >> 12) | (v << 20)) & _M32
            s[a] = (s[a] + s[b] + y) & _M32
            v = s[d] ^ s[a]
            s[d] = ((v >> 8) | (v << 24)) & _M32
            s[c] = (s[c] + s[d]) & _M32
            v = s[b] ^ s[c]
            s[b] = ((v >> 7) | (v << 25)) & _M32
        if r < 6:
            m = [m[i] for i in _PERM]
    out = [s[i] ^ s[i + 8] for i in range(8)]
    if full:
        out += [s[i + 8] ^ cv[i] for i in range(8)]
    return out


def _words(block):
    block = block + bytes(64 - len(block))
    return list(struct.unpack("<16I", block))


def _chunk_output(chunk, index):
    """The chunk's chaining value before its last block, and that block's
    inputs: (cv, words, counter, len, flags)."""
    cv = _IV[:]
    blocks = [chunk[i:i + 64] for i in range(0, len(chunk), 64)] or [b""]
    for i, b in enumerate(blocks[:-1]):
        cv = _compress(cv, _words(b), index, 64, _CHUNK_START if i == 0 else 0)
    last = blocks[-1]
    flags = _CHUNK_END | (_CHUNK_START if len(blocks) == 1 else 0)
    return cv, _words(last), index, len(last), flags


def blake3(data, length=32):
    """BLAKE3 of ``data`` in its default (unkeyed) hash mode: ``length``
    bytes of its output (32, the digest, by default; more is its
    extendable output, of which the first 32 bytes are the digest)."""
    data = bytes(data)
    chunks = [data[i:i + 1024] for i in range(0, len(data), 1024)] or [b""]
    if len(chunks) == 1:
        root = _chunk_output(chunks[0], 0)
    else:
        def cv_of(lo, hi):
            if hi - lo == 1:
                o = _chunk_output(chunks[lo], lo)
                return _compress(o[0], o[1], o[2], o[3], o[4])
            left = 1 << ((hi - lo - 1).bit_length() - 1)
            return _compress(_IV[:], cv_of(lo, lo + left) + cv_of(lo + left, hi), 0, 64, _PARENT)
        n = len(chunks)
        left = 1 << ((n - 1).bit_length() - 1)
        root = (_IV[:], cv_of(0, left) + cv_of(left, n), 0, 64, _PARENT)
    cv, m, _, blen, flags = root
    out = b""
    t = 0
    while len(out) < length:
        w = _compress(cv, m, t, blen, flags | _ROOT, full=True)
        out += struct.pack("<16I", *w)
        t += 1
    return out[:length]


def address(data):
    """The content address of ``data`` (docs/spec/addresses.md):
    ``"b3:"`` and the 64 lowercase hex digits of its BLAKE3 digest."""
    return "b3:" + blake3(data).hex()


# =============================================================================
# Ed25519 verification (RFC 8032 §5.1.7, cofactorless), keys.md's checks
# =============================================================================
_P = 2 ** 255 - 19
_L = 2 ** 252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_IDENTITY = (0, 1, 1, 0)


def _padd(p, q):
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = t1 * 2 * _D * t2 % _P
    d = z1 * 2 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _pmul(s, p):
    q = _IDENTITY
    while s > 0:
        if s & 1:
            q = _padd(q, p)
        p = _padd(p, p)
        s >>= 1
    return q


def _pneg(p):
    x, y, z, t = p
    return (-x % _P, y, z, -t % _P)


def _pequal(p, q):
    return (p[0] * q[2] - q[0] * p[2]) % _P == 0 and (p[1] * q[2] - q[1] * p[2]) % _P == 0


def _pencode(p):
    zi = pow(p[2], _P - 2, _P)
    x, y = p[0] * zi % _P, p[1] * zi % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _pdecode(s):
    if len(s) != 32:
        return None
    v = int.from_bytes(s, "little")
    y, sign = v & ((1 << 255) - 1), v >> 255
    if y >= _P:
        return None
    u, w = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(w, 3, _P) * pow(u * pow(w, 7, _P), (_P - 5) // 8, _P) % _P
    if (w * x * x - u) % _P != 0:
        if (w * x * x + u) % _P != 0:
            return None
        x = x * _SQRT_M1 % _P
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


_BASE = _pdecode(bytes.fromhex("5866666666666666666666666666666666666666666666666666666666666666"))


def check_key(pub, where="key"):
    """Refuse (``weak-key``) 32 bytes that are not the canonical encoding of
    a curve point, or that encode a point of small order (keys.md)."""
    a = _pdecode(bytes(pub))
    if a is None:
        raise Refusal("weak-key", where, "not the canonical encoding of a curve point")
    if _pequal(_pmul(8, a), _IDENTITY):
        raise Refusal("weak-key", where, "a point of small order")
    return a


def ed25519_verify(pub, msg, sig, where="signature"):
    """Verify an Ed25519 signature strictly: the key is checked first
    (``weak-key``), the signature must be 64 bytes with ``S`` below the
    group order, and ``[S]B - [k]A`` must encode to exactly ``R``
    (``signature`` otherwise). Returns None; raises :class:`Refusal`."""
    pub, msg, sig = bytes(pub), bytes(msg), bytes(sig)
    a = check_key(pub, where)
    if len(sig) != 64:
        raise Refusal("signature", where, "%d bytes, not 64" % len(sig))
    s = int.from_bytes(sig[32:], "little")
    if s >= _L:
        raise Refusal("signature", where, "S is not below L")
    k = int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little") % _L
    r = _padd(_pmul(s, _BASE), _pneg(_pmul(k, a)))
    if _pencode(r) != sig[:32]:
        raise Refusal("signature", where, "does not verify")


def parse_key(text, where="key"):
    """The 32 bytes of a public key in its text form ``ed25519:`` + 64
    lowercase hex digits (keys.md); weak keys are refused."""
    if not isinstance(text, str) or len(text) != 72 or not text.startswith("ed25519:") or \
            any(c not in "0123456789abcdef" for c in text[8:]):
        raise Refusal("invalid", where, "%r is not ed25519: and 64 lowercase hex digits" % (text,))
    k = bytes.fromhex(text[8:])
    check_key(k, where)
    return k


# RFC 8032 §7.1, TEST 1-3: (public key, message, signature).
RFC8032_TESTS = [
    ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]
RFC8032_TEST1_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"


# =============================================================================
# Core-deterministic CBOR (RFC 8949 §4.2.1), a strict decoder
# =============================================================================
class CBORTag:
    """A CBOR tag around a value, as the decoder keeps it."""

    def __init__(self, number, value):
        self.number, self.value = number, value

    def __repr__(self):
        return "CBORTag(%d, %r)" % (self.number, self.value)


class _Simple:
    def __init__(self, n):
        self.n = n


class _RawKey:
    def __init__(self, raw):
        self.raw = raw

    def __hash__(self):
        return hash(self.raw)

    def __eq__(self, other):
        return isinstance(other, _RawKey) and other.raw == self.raw


_MAX_DEPTH = 32


def cbor_decode(data, where="cbor"):
    """Decode one core-deterministic CBOR data item that is all of ``data``,
    refusing (:class:`Refusal`) with canonical.md's codes: ``truncated``,
    ``malformed``, ``cbor-non-shortest``, ``cbor-indefinite``,
    ``cbor-unsorted-keys``, ``duplicate-key``. Maps decode to dicts, byte
    strings to bytes, tags to :class:`CBORTag`."""
    data = bytes(data)
    value, end = _item(data, 0, where, 1)
    if end != len(data):
        raise Refusal("malformed", where, "%d bytes after the item, at offset %d" % (len(data) - end, end))
    return value


def cbor_decode_prefix(data, offset=0, where="cbor"):
    """Decode the one data item that starts at ``offset`` of ``data``
    (strictly, as :func:`cbor_decode`): returns (value, offset after it)."""
    return _item(bytes(data), offset, where, 1)


def _need(data, off, n, where):
    if off + n > len(data):
        raise Refusal("truncated", where, "the item ends at offset %d, inside a value" % len(data))


def _head(data, off, where):
    _need(data, off, 1, where)
    ib = data[off]
    major, ai = ib >> 5, ib & 31
    if ai < 24:
        return major, ai, ai, off + 1
    if ai in (28, 29, 30):
        raise Refusal("malformed", where, "reserved additional information %d at offset %d" % (ai, off))
    if ai == 31:
        if major in (2, 3, 4, 5):
            raise Refusal("cbor-indefinite", where, "an indefinite length at offset %d" % off)
        raise Refusal("malformed", where, "additional information 31 for major type %d at offset %d" % (major, off))
    n = 1 << (ai - 24)
    _need(data, off + 1, n, where)
    arg = int.from_bytes(data[off + 1:off + 1 + n], "big")
    if major != 7:
        if (ai == 24 and arg < 24) or (ai > 24 and arg < (1 << (8 * (n >> 1)))):
            raise Refusal("cbor-non-shortest", where, "an argument not in its shortest form at offset %d" % off)
    return major, ai, arg, off + 1 + n


def _float_shortest(ai, raw, where, off):
    if ai == 25:
        v = struct.unpack(">e", raw)[0]
        if v != v and raw != b"\x7e\x00":
            raise Refusal("cbor-non-shortest", where, "a NaN other than f97e00 at offset %d" % off)
        return v
    v = struct.unpack(">f" if ai == 26 else ">d", raw)[0]
    if v != v:
        raise Refusal("cbor-non-shortest", where, "a NaN other than f97e00 at offset %d" % off)
    for fmt in (["e"] if ai == 26 else ["e", "f"]):
        try:
            if struct.pack(">d", struct.unpack(">" + fmt, struct.pack(">" + fmt, v))[0]) == struct.pack(">d", v):
                raise Refusal("cbor-non-shortest", where, "a float that fits a shorter form at offset %d" % off)
        except (OverflowError, struct.error):
            pass
    return v


def _item(data, off, where, depth):
    if depth > _MAX_DEPTH:
        raise Refusal("malformed", where, "nested more than %d deep at offset %d" % (_MAX_DEPTH, off))
    start = off
    major, ai, arg, off = _head(data, off, where)
    if major == 0:
        return arg, off
    if major == 1:
        return -1 - arg, off
    if major in (2, 3):
        _need(data, off, arg, where)
        raw = data[off:off + arg]
        if major == 2:
            return raw, off + arg
        try:
            return raw.decode("utf-8"), off + arg
        except UnicodeDecodeError:
            raise Refusal("malformed", where, "a text string that is not UTF-8 at offset %d" % start)
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
            kraw = data[kstart:off]
            if prev is not None:
                if kraw == prev:
                    raise Refusal("duplicate-key", where, "a map key twice at offset %d" % kstart)
                if kraw < prev:
                    raise Refusal("cbor-unsorted-keys", where, "a map key out of bytewise order at offset %d" % kstart)
            prev = kraw
            v, off = _item(data, off, where, depth + 1)
            if isinstance(k, (list, dict, CBORTag)):
                k = _RawKey(kraw)
            out[k] = v
        return out, off
    if major == 6:
        v, off = _item(data, off, where, depth + 1)
        return CBORTag(arg, v), off
    if ai < 24:
        if ai in (20, 21, 22):
            return (False, True, None)[ai - 20], off
        return _Simple(ai), off
    if ai == 24:
        if arg < 32:
            raise Refusal("malformed", where, "simple value %d in the two-byte form at offset %d" % (arg, start))
        return _Simple(arg), off
    return _float_shortest(ai, data[start + 1:off], where, start), off


def cbor_encode(v):
    """Core-deterministic encoding of ints, bytes, text, lists, dicts (keys
    sorted bytewise by their encodings), bools, None and :class:`CBORTag`:
    how a payload is re-encoded to check it, and a Sig_structure built."""
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
    if isinstance(v, (bytes, bytearray)):
        return head(2, len(v)) + bytes(v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        return head(3, len(b)) + b
    if isinstance(v, (list, tuple)):
        return head(4, len(v)) + b"".join(cbor_encode(x) for x in v)
    if isinstance(v, dict):
        items = sorted((cbor_encode(k), cbor_encode(x)) for k, x in v.items())
        return head(5, len(items)) + b"".join(k + x for k, x in items)
    if isinstance(v, CBORTag):
        return head(6, v.number) + cbor_encode(v.value)
    raise ValueError("cannot encode %r" % (v,))


# =============================================================================
# JSON: RFC 8785 canonicalization, and canonical.md's strict reading
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


def _jcs_number(x):
    """ECMAScript's Number::toString for a finite double (RFC 8785 §3.2.2.3):
    the shortest digits that round-trip (Python's repr gives the same)."""
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        raise ValueError("JCS has no form for %r" % x)
    if x == 0:
        return "0"
    if x < 0:
        return "-" + _jcs_number(-x)
    _, digits, exp = decimal.Decimal(repr(x)).normalize().as_tuple()
    s = "".join(map(str, digits))
    k = len(s)
    n = exp + k
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    es = ("+" if e >= 0 else "-") + str(abs(e))
    return (s if k == 1 else s[0] + "." + s[1:]) + "e" + es


def jcs(v):
    """The RFC 8785 (JCS) text of a JSON value (dicts, lists, str, int,
    float, bool, None): members sorted by the UTF-16 code units of their
    names, no whitespace, numbers as ECMAScript writes them. Encode the
    result as UTF-8 for the canonical bytes."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return _jcs_number(v)
    if isinstance(v, str):
        return _jcs_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(_jcs_string(k) + ":" + jcs(x) for k, x in items) + "}"
    raise TypeError("not a JSON value: %r" % (v,))


def parse_canonical_json(raw, where="json"):
    """Parse bytes that must be a canonical JSON record (canonical.md):
    one JSON value in its JCS form, integers only (``float``) of magnitude
    below 2^53 (``int-range``), no member twice (``duplicate-key``), at
    most 64 deep. Refuses with those codes, ``malformed``, ``truncated``
    or ``non-canonical``."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal("malformed", where, "not UTF-8")

    def pairs(ps):
        d = {}
        for k, v in ps:
            if k in d:
                raise Refusal("duplicate-key", where, "member %r twice" % k)
            d[k] = v
        return d

    def floats(s):
        raise Refusal("float", where, s)

    def const(s):
        raise Refusal("malformed", where, s)
    try:
        v = json.loads(text, object_pairs_hook=pairs, parse_float=floats, parse_constant=const)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":
            raise Refusal("non-canonical", where, "bytes after the value at %d" % e.pos)
        if e.pos >= len(text) or e.msg.startswith("Unterminated"):
            raise Refusal("truncated", where, "ends inside a value")
        raise Refusal("malformed", where, "%s at %d" % (e.msg, e.pos))
    except RecursionError:
        raise Refusal("malformed", where, "nested too deep")

    def walk(x, depth):
        if depth > 64:
            raise Refusal("malformed", where, "nested more than 64 deep")
        if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 2 ** 53:
            raise Refusal("int-range", where, str(x))
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise Refusal("malformed", where, "a lone surrogate")
        if isinstance(x, dict):
            for k, y in x.items():
                walk(k, depth)
                walk(y, depth + 1)
        if isinstance(x, list):
            for y in x:
                walk(y, depth + 1)
    walk(v, 1)
    if jcs(v) != text:
        raise Refusal("non-canonical", where, "not its RFC 8785 form")
    return v


def b64url_decode(s, where="base64url"):
    """Strict unpadded base64url (the one spelling of the bytes)."""
    import base64
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if not isinstance(s, str) or any(c not in alphabet for c in s) or len(s) % 4 == 1:
        raise Refusal("malformed", where, "not base64url without padding")
    b = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if base64.urlsafe_b64encode(b).decode().rstrip("=") != s:
        raise Refusal("malformed", where, "not the canonical base64url of its bytes")
    return b


# =============================================================================
# Self-check against official vectors
# =============================================================================
def _find_vectors(explicit, *rel):
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (os.path.join(here, "..", "..", "..", ".."), os.path.join(here, "..", "..", "..", "..", "..")):
        p = os.path.normpath(os.path.join(up, *rel))
        if os.path.exists(p):
            return p
    return None


def self_check(blake3_vectors=None, jcs_vectors=None, cose_example=None):
    """Check every primitive here against official vectors and return the
    list of what was checked; raise AssertionError at the first
    disagreement. Always: RFC 8032 §7.1 tests 1-3 (each also refused with a
    bit flipped, with S + L, and cut to 63 bytes), the identity key refused
    as weak, addresses.md's two addresses and keys.md's key id. With the
    files (found in the project's testdata/vectors when the package runs
    from a checkout, or given): the BLAKE3 team's test_vectors.json (every
    case's whole 131-byte hash-mode output), the cyberphone JCS vectors,
    and the COSE WG example eddsa-sig-01 (Sig_structure and signature)."""
    done = []
    for n, (pub, msg, sig) in enumerate(RFC8032_TESTS, 1):
        pub, msg, sig = bytes.fromhex(pub), bytes.fromhex(msg), bytes.fromhex(sig)
        ed25519_verify(pub, msg, sig)
        spoilt = [sig[:10] + bytes([sig[10] ^ 1]) + sig[11:],
                  sig[:32] + (int.from_bytes(sig[32:], "little") + _L).to_bytes(32, "little"),
                  sig[:63]]
        for b in spoilt:
            try:
                ed25519_verify(pub, msg, b)
            except Refusal as e:
                assert e.code == "signature", "RFC 8032 test %d: %s" % (n, e)
            else:
                raise AssertionError("RFC 8032 test %d: a spoilt signature verified" % n)
        try:
            ed25519_verify(pub, msg + b"x", sig)
        except Refusal as e:
            assert e.code == "signature"
        else:
            raise AssertionError("RFC 8032 test %d: verified over another message" % n)
    h = hashlib.sha512(bytes.fromhex(RFC8032_TEST1_SEED)).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    assert _pencode(_pmul(a, _BASE)).hex() == RFC8032_TESTS[0][0], "RFC 8032 test 1 seed does not derive its key"
    try:
        ed25519_verify((1).to_bytes(32, "little"), b"any", _pencode(_BASE) + (1).to_bytes(32, "little"))
    except Refusal as e:
        assert e.code == "weak-key", "the identity key: %s" % e
    else:
        raise AssertionError("the identity key was accepted")
    done.append("Ed25519: RFC 8032 §7.1 tests 1-3, spoilt signatures, the identity key")
    assert address(b"") == "b3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert address(b"abc") == "b3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
    assert address(bytes.fromhex(RFC8032_TESTS[0][0])) == \
        "b3:6c31041268f471609c79f5f2dbcc38e4a4ab2f4d416109a4e09fcf50fd0f0062", "keys.md key id"
    done.append("BLAKE3: addresses.md and keys.md examples")

    path = _find_vectors(blake3_vectors, "testdata", "vectors", "blake3", "test_vectors.json")
    if path:
        with open(path) as f:
            tv = json.load(f)
        for case in tv["cases"]:
            n = case["input_len"]
            want = bytes.fromhex(case["hash"])
            got = blake3(bytes(i % 251 for i in range(n)), len(want))
            assert got == want, "BLAKE3 disagrees with the official vector of length %d" % n
        done.append("BLAKE3: %d official test vectors (%s), %d-byte outputs" % (len(tv["cases"]), path, len(want)))

    jdir = _find_vectors(jcs_vectors, "testdata", "vectors", "jcs-cyberphone")
    if jdir:
        names = sorted(os.listdir(os.path.join(jdir, "input")))
        for name in names:
            with open(os.path.join(jdir, "input", name), "rb") as f:
                v = json.loads(f.read().decode("utf-8"))
            with open(os.path.join(jdir, "output", name), "rb") as f:
                want = f.read()
            assert jcs(v).encode("utf-8") == want, "JCS disagrees with the cyberphone vector %s" % name
        done.append("JCS: %d cyberphone vectors (%s)" % (len(names), jdir))

    cpath = _find_vectors(cose_example, "testdata", "vectors", "cose-wg-examples", "eddsa-examples", "eddsa-sig-01.json")
    if cpath:
        with open(cpath) as f:
            ex = json.load(f)
        env = cbor_decode(bytes.fromhex(ex["output"]["cbor"]), "cose-wg")
        assert isinstance(env, CBORTag) and env.number == 18
        prot, _, payload, sig = env.value
        tbs = cbor_encode(["Signature1", prot, b"", payload])
        assert tbs.hex().upper() == ex["intermediates"]["ToBeSign_hex"], "COSE Sig_structure differs"
        ed25519_verify(bytes.fromhex(ex["input"]["sign0"]["key"]["x_hex"]), tbs, sig)
        done.append("COSE_Sign1: COSE WG eddsa-sig-01 (%s)" % cpath)
    # Strict CBOR: the shortest-form and order rules refuse what they must.
    for hexs, code in (("1817", "cbor-non-shortest"), ("5f40ff", "cbor-indefinite"),
                       ("a2616201616101", "cbor-unsorted-keys"), ("a2616101616102", "duplicate-key"),
                       ("1a000100", "truncated"), ("0000", "malformed")):
        try:
            cbor_decode(bytes.fromhex(hexs))
        except Refusal as e:
            assert e.code == code, "CBOR %s: %s, want %s" % (hexs, e.code, code)
        else:
            raise AssertionError("CBOR %s was accepted" % hexs)
    assert cbor_encode(cbor_decode(bytes.fromhex("a3616b636f75746171f66172820102"))) == \
        bytes.fromhex("a3616b636f75746171f66172820102")
    done.append("CBOR: core-deterministic refusals")
    return done


if __name__ == "__main__":  # pragma: no cover
    for line in self_check():
        print("ok  " + line)
