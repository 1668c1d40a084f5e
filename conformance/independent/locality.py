#!/usr/bin/env python3
"""An independent verifier of sandbox.locality/1 claims, written from
docs/spec/locality.md (and the documents it cites: canonical.md, keys.md,
addresses.md, conformance.md) alone: Python's standard library, and the
Ed25519 (RFC 8032, strict) and RFC 8785 check of the sibling verifier
jcp.py, which check themselves against RFC 8032's tests before anything
else. None of this project's code.

usage: locality.py --vectors FILE.json
       locality.py --claim CLAIM.json --anchors ANCHORS.json --host ed25519:HEX --binding b3:HEX

--vectors checks every case of a `sandbox.locality-vectors/1` file
(conformance/v1/locality/locality.json), prints one line per case and
exits 1 if any ends other than it states (or finds other margins).
--claim verifies one claim against a JSON array of published anchors
({"key","position":{"lat_udeg","lon_udeg"}}) and prints `ok` and each
measurement's margin, or the refusal and where.
"""
import json
import math
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jcp  # noqa: E402  (its Ed25519 and JCS check only)

Reject = jcp.Reject

# locality.md §2, §3: the wire form.
TYPE = "sandbox.locality/1"
MEASUREMENT_TYPE = "sandbox.locality-measurement/1"
MEASUREMENT_CONTEXT = b"sandbox.locality/1 measurement\x00"
ANSWER_CONTEXT = b"sandbox.locality/1 answer\x00"
MAX_CLAIM = 65536
MAX_MEASUREMENTS = 64
# locality.md §4: the rule's constants.
EARTH_RADIUS_M = 6371008.8
C_M_PER_S = 299792458
MAX_RTT_US = 60000000
MAX_RADIUS_M = 20015115

# Each object's members and their JSON types (locality.md §3).
POSITION = {"lat_udeg": "int", "lon_udeg": "int"}
REGION = {"centre": POSITION, "radius_m": "int"}
STATEMENT = {"anchor": "key", "at": "int", "binding": "addr", "host": "key", "host_sig": "hex",
             "nonce": "hex", "position": POSITION, "rtt_us": "int", "type": "str"}
MEASUREMENT = {"signature": "hex", "statement": STATEMENT}
CLAIM = {"binding": "addr", "host": "key", "measurements": [MEASUREMENT], "region": REGION, "type": "str"}

KEY_RE = re.compile(r"^ed25519:[0-9a-f]{64}$")
ADDR_RE = re.compile(r"^b3:[0-9a-f]{64}$")
HEX_RE = re.compile(r"^(?:[0-9a-f]{2})*$")


def at(where, field):
    return "%s.%s" % (where, field)


def shape(v, schema, where):
    """Members: none unknown (the first in key order), none missing (in the
    table's order), then recursively. locality.md §6 step 2."""
    if isinstance(schema, list):
        if not isinstance(v, list):
            raise Reject("invalid", where, "not an array")
        for i, x in enumerate(v):
            shape(x, schema[0], "%s[%d]" % (where, i))
        return
    if isinstance(schema, dict):
        if not isinstance(v, dict):
            raise Reject("invalid", where, "not an object")
        for k in sorted(v, key=lambda k: k.encode("utf-16-be")):
            if k not in schema:
                raise Reject("unknown-field", at(where, k), "not a member of this object")
        for k in schema:
            if k not in v:
                raise Reject("missing-field", at(where, k), "absent")
        for k in sorted(v):
            shape(v[k], schema[k], at(where, k))
        return
    # A scalar: its JSON type and its text form (locality.md §3).
    ok = {
        "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
        "str": lambda x: isinstance(x, str),
        "key": lambda x: isinstance(x, str) and KEY_RE.match(x) is not None,
        "addr": lambda x: isinstance(x, str) and ADDR_RE.match(x) is not None,
        "hex": lambda x: isinstance(x, str) and HEX_RE.match(x) is not None,
    }[schema](v)
    if not ok:
        raise Reject("invalid", where, "not a value of its type (%s)" % schema)


def key_bytes(s):
    return bytes.fromhex(s[len("ed25519:"):])


def addr_bytes(s):
    return bytes.fromhex(s[len("b3:"):])


def check_position(p, where):
    if not -90000000 <= p["lat_udeg"] <= 90000000:
        raise Reject("invalid", at(where, "lat_udeg"), "outside [-90000000, 90000000]")
    if not -180000000 <= p["lon_udeg"] <= 180000000:
        raise Reject("invalid", at(where, "lon_udeg"), "outside [-180000000, 180000000]")


def parse(raw):
    """locality.md §6 steps 1-3: size, RFC 8785, members, value rules."""
    if len(raw) > MAX_CLAIM:
        raise Reject("invalid", "claim", "%d bytes" % len(raw))
    if not raw:
        raise Reject("truncated", "claim", "empty")
    c = jcp.parse_canonical_json(raw, "claim")
    shape(c, CLAIM, "claim")
    if c["type"] != TYPE:
        raise Reject("unrecognised", "claim.type", c["type"])
    if c["host"] == "ed25519:" + "0" * 64:
        raise Reject("missing-field", "claim.host", "the all-zero key")
    if c["binding"] == "b3:" + "0" * 64:
        raise Reject("missing-field", "claim.binding", "the all-zero address")
    check_position(c["region"]["centre"], "claim.region.centre")
    if not 1 <= c["region"]["radius_m"] <= MAX_RADIUS_M:
        raise Reject("invalid", "claim.region.radius_m", "outside [1, %d]" % MAX_RADIUS_M)
    ms = c["measurements"]
    if not 1 <= len(ms) <= MAX_MEASUREMENTS:
        raise Reject("invalid", "claim.measurements", "%d measurements" % len(ms))
    seen = set()
    for i, m in enumerate(ms):
        w = "claim.measurements[%d]" % i
        s, sw = m["statement"], w + ".statement"
        if s["type"] != MEASUREMENT_TYPE:
            raise Reject("unrecognised", sw + ".type", s["type"])
        if len(s["nonce"]) != 64:
            raise Reject("invalid", sw + ".nonce", "not 32 bytes")
        if len(s["host_sig"]) != 128:
            raise Reject("invalid", sw + ".host_sig", "not 64 bytes")
        if not 1 <= s["rtt_us"] <= MAX_RTT_US:
            raise Reject("invalid", sw + ".rtt_us", "outside [1, %d]" % MAX_RTT_US)
        if s["at"] < 0:
            raise Reject("invalid", sw + ".at", "before 1970")
        if len(m["signature"]) != 128:
            raise Reject("signature", w + ".signature", "not 64 bytes")
        check_position(s["position"], sw + ".position")
        if s["nonce"] in seen:
            raise Reject("invalid", sw + ".nonce", "a round trip twice")
        seen.add(s["nonce"])
    return c


def great_circle_m(a, b):
    """locality.md §4.1, step by step in binary64."""
    k = math.pi / 180000000
    p1 = float(a["lat_udeg"]) * k
    p2 = float(b["lat_udeg"]) * k
    dp = p2 - p1
    dl = float(b["lon_udeg"]) * k - float(a["lon_udeg"]) * k
    s1 = math.sin(dp / 2)
    s2 = math.sin(dl / 2)
    h = s1 * s1 + (math.cos(p1) * math.cos(p2)) * (s2 * s2)
    h = min(max(h, 0.0), 1.0)
    d = (2 * EARTH_RADIUS_M) * math.asin(math.sqrt(h))
    return math.ceil(d)


def distance_m(a, b):
    """locality.md §4.1: widened by 1 %, rounded up."""
    g = great_circle_m(a, b)
    return g + (g + 99) // 100


def bound_m(rtt_us):
    """locality.md §4.2: half the round trip at c, rounded up."""
    return (rtt_us * C_M_PER_S + 1999999) // 2000000


def verify(raw, anchors, binding, host):
    """locality.md §6. Returns the margins; raises Reject. A claim refused
    for distance carries its margins on the exception."""
    c = parse(raw)
    if c["host"] != host:
        raise Reject("locality-host", "claim.host", "another host")
    if c["binding"] != binding:
        raise Reject("locality-binding", "claim.binding", "another run")
    published = {a["key"]: a["position"] for a in anchors}
    region = c["region"]
    margins = []
    for i, m in enumerate(c["measurements"]):
        w = "claim.measurements[%d]" % i
        s, sw = m["statement"], w + ".statement"
        anchor = key_bytes(s["anchor"])
        jcp.check_key(anchor, sw + ".anchor")
        msg = MEASUREMENT_CONTEXT + jcp.jcs(s).encode("utf-8")
        jcp.check_signature(anchor, msg, bytes.fromhex(m["signature"]), w + ".signature")
        if s["anchor"] not in published:
            raise Reject("locality-unknown-anchor", sw + ".anchor", "not published")
        if published[s["anchor"]] != s["position"]:
            raise Reject("locality-anchor-position", sw + ".position", "not where the anchor is published")
        if s["host"] != c["host"]:
            raise Reject("locality-host", sw + ".host", "another host")
        if s["binding"] != c["binding"]:
            raise Reject("locality-binding", sw + ".binding", "another run")
        hk = key_bytes(s["host"])
        jcp.check_key(hk, sw + ".host")
        answer = ANSWER_CONTEXT + bytes.fromhex(s["nonce"]) + anchor + addr_bytes(s["binding"])
        try:
            jcp.check_signature(hk, answer, bytes.fromhex(s["host_sig"]), sw + ".host_sig")
        except Reject:
            raise Reject("locality-host", sw + ".host_sig", "the host's answer does not verify")
        margins.append(region["radius_m"] - distance_m(s["position"], region["centre"]) - bound_m(s["rtt_us"]))
    if not any(x >= 0 for x in margins):
        e = Reject("locality-too-far", "claim.region", "best margin %d m" % max(margins))
        e.margins = margins
        raise e
    return margins


def run_vectors(path):
    with open(path, "rb") as f:
        v = json.loads(f.read())
    if v.get("type") != "sandbox.locality-vectors/1":
        sys.exit("%s: not a sandbox.locality-vectors/1 file" % path)
    bad = 0
    for c in v["cases"]:
        margins = None
        try:
            margins = verify(c["claim"].encode("utf-8"), v["anchors"], c["binding"], c["host"])
            got, where = "ok", ""
        except Reject as e:
            got, where = e.code, e.where
            margins = getattr(e, "margins", None)
        want_m = c.get("margins_m")
        ok = got == c["expect"] and (margins or None) == (want_m or None)
        bad += not ok
        print("%s  %-28s %-26s %s%s" % ("ok  " if ok else "DIFF", c["name"], got, where,
                                         "" if ok else "  (want %s, margins %s want %s)" % (c["expect"], margins, want_m)))
    print("%d cases, %d disagree" % (len(v["cases"]), bad))
    return 1 if bad else 0


def main(argv):
    jcp.self_check()
    if len(argv) == 2 and argv[0] == "--vectors":
        return run_vectors(argv[1])
    if len(argv) == 8 and argv[0] == "--claim" and argv[2] == "--anchors" and argv[4] == "--host" and argv[6] == "--binding":
        with open(argv[1], "rb") as f:
            raw = f.read()
        with open(argv[3]) as f:
            anchors = json.load(f)
        try:
            margins = verify(raw, anchors, argv[7], argv[5])
        except Reject as e:
            print(e)
            return 1
        print("ok", " ".join("%d" % m for m in margins))
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
