#!/usr/bin/env python3
"""Self-test of jcp.py until the Go side publishes jcp.json and standing.json.

usage: jcp_selftest.py [--keep DIR]

It signs JCP objects with an RFC 8032 Ed25519 *signer* written here (checked
against RFC 8032's test 1 signature and the COSE WG example eddsa-sig-01),
builds grants, chains, widened children, mint policies, invocations,
amendments and ledgers, writes them as two `sandbox.jcp-vectors/1` files in
the shape of jcp.json and standing.json, and runs `jcp.py --vectors` on each
(a subprocess: the command line a user runs), then `--chain` and `--ledger`
on sample files. It also opens real bytes the project did not write for this
verifier: the COSE WG Ed25519 example, the RFC 8949 deterministic-CBOR
examples, the dCBOR invalid cases that core-deterministic CBOR shares, and
the JCR-1 receipts of conformance/v1 (the same envelope profile).

Each case says what it is about; every expected code is the one jcp.md
names for it. Exits 1 on any disagreement. --keep DIR keeps the files.
"""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import jcp  # noqa: E402
from jcp import Reject, blake3, cbor_encode, cbor_decode, Tag  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BLAKE3_VECTORS = os.path.join(REPO, "testdata", "vectors", "blake3", "test_vectors.json")

NOW = 1_700_000_000
DAY = 86400


# =============================================================================
# An RFC 8032 Ed25519 signer (§5.1.5, §5.1.6), on jcp.py's curve arithmetic
# =============================================================================
class Key:
    """An Ed25519 key pair from a 32-byte seed."""

    def __init__(self, seed):
        h = hashlib.sha512(seed).digest()
        self.a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
        self.prefix = h[32:]
        self.pub = jcp.point_encode(jcp.point_mul(self.a, jcp.BASE))
        self.kid = blake3(self.pub)

    @classmethod
    def named(cls, name):
        return cls(hashlib.sha256(b"jcp-selftest " + name.encode()).digest())

    def sign(self, msg):
        r = int.from_bytes(hashlib.sha512(self.prefix + msg).digest(), "little") % jcp.L
        rb = jcp.point_encode(jcp.point_mul(r, jcp.BASE))
        k = int.from_bytes(hashlib.sha512(rb + self.pub + msg).digest(), "little") % jcp.L
        return rb + ((r + k * self.a) % jcp.L).to_bytes(32, "little")

    def text(self):
        return "ed25519:" + self.pub.hex()


ROOT = Key(bytes.fromhex(jcp.RFC8032_TEST1_SEED))   # the pack's trusted test key
OTHER = Key.named("untrusted root")
A, B, C, M, X = (Key.named(n) for n in ("alice", "bob", "carol", "minter", "mallory"))

IMG = sorted(blake3(b"image %d" % i) for i in range(1, 4))
I1, I2, I3 = IMG

CT = {k: ct for ct, (k, _) in jcp.CONTENT_TYPES.items()}


def nonce(label):
    return hashlib.sha256(b"nonce " + str(label).encode()).digest()[:16]


def envelope(kind, payload, key, alg=-8, payload_bytes=None, prot=None, unprot=None, tagged=True, sig=None,
             kid=None):
    """A COSE_Sign1 JCP object: protected {1: alg, 3: CT, 4: kid}, {} , the
    payload, the signature over ["Signature1", protected, h'', payload]."""
    if prot is None:
        prot = {1: alg, 3: CT[kind], 4: key.kid if kid is None else kid}
    pb = cbor_encode(prot) if isinstance(prot, dict) else prot
    body = cbor_encode(payload) if payload_bytes is None else payload_bytes
    if sig is None:
        sig = key.sign(cbor_encode(["Signature1", pb, b"", body]))
    arr = cbor_encode([pb, {} if unprot is None else unprot, body, sig])
    return (b"\xd2" if tagged else b"") + arr


def b64(b):
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def idof(env):
    return blake3(env)


# =============================================================================
# Builders
# =============================================================================
ROOT_CAVEATS = {
    "models": ["llama-3", "mistral-7b"],
    "tiers": ["S1", "S2", "S3"],
    "hosts": ["*.example.com:443", "10.0.0.0/8"],
    "paths": ["/data", "/models"],
    "runs": 100,
    "rate": {"n": 10, "per": 60},
}


def grant_payload(iss, aud, parent=None, policy=None, iat=NOW - 100, exp=NOW + DAY, depth=3,
                  images=None, ceilings=None, caveats=None, label=0, **extra):
    p = {"v": 1, "iss": iss.pub, "aud": aud.pub, "iat": iat, "exp": exp, "nonce": nonce(label),
         "depth": depth, "images": images if images is not None else [I1, I2],
         "ceilings": ceilings if ceilings is not None else {"Cpu": 10 ** 9, "Gpu": 5 * 10 ** 8},
         "caveats": caveats if caveats is not None else dict(ROOT_CAVEATS)}
    if parent is not None:
        p["parent"] = parent
    if policy is not None:
        p["policy"] = policy
    p.update(extra)
    return p


def grant(iss, aud, **kw):
    return envelope("grant", grant_payload(iss, aud, **kw), iss)


def narrow(caveats, **changes):
    """caveats with some changed (None: dropped); text sets sorted as §2 wants."""
    c = dict(caveats)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = sorted(v, key=lambda x: x.encode()) if isinstance(v, list) else v
    return c


G1_CAVEATS = narrow(ROOT_CAVEATS, models=["llama-3"], tiers=["S1", "S2"], hosts=["api.example.com:443", "10.1.0.0/16"],
                    paths=["/data"], runs=50, rate={"n": 5, "per": 120})
G2_CAVEATS = narrow(G1_CAVEATS, hosts=["api.example.com:443"], paths=["/data/in"], runs=20)


def base_chain():
    """A valid 3-deep chain R -> A -> B -> C, each narrower than its parent."""
    g0 = grant(ROOT, A, depth=3, label="g0")
    g1 = grant(A, B, parent=idof(g0), depth=2, ceilings={"Cpu": 5 * 10 ** 8, "Gpu": 10 ** 8},
               exp=NOW + DAY - 10, caveats=G1_CAVEATS, label="g1")
    g2 = grant(B, C, parent=idof(g1), depth=1, images=[I1], ceilings={"Cpu": 10 ** 8},
               exp=NOW + DAY - 20, caveats=G2_CAVEATS, label="g2")
    return g0, g1, g2


G0, G1, G2 = base_chain()


def child_of(parent_env, parent_key, child_aud, **kw):
    """A child of parent_env issued by its audience `parent_key`; kw overrides."""
    pp = _p(parent_env)
    args = dict(depth=pp["depth"] - 1, images=pp["images"], ceilings=pp["ceilings"], exp=pp["exp"],
                caveats=pp["caveats"], label=("child", parent_env[-8:].hex(), repr(sorted(kw.items()))))
    args.update(kw)
    return grant(parent_key, child_aud, parent=idof(parent_env), **args)


def _payload(env):
    return cbor_decode(env, "").value[2]


TEMPLATE_CAVEATS = {"models": ["llama-3"], "tiers": ["S1"], "hosts": ["*.example.com:443"], "paths": ["/data"],
                    "runs": 10, "rate": {"n": 5, "per": 60}}


def policy_payload(iss, held, minter, to, template=None, max_=3, rate=None, events=None, iat=NOW - 50,
                   exp=NOW + DAY - 30, label="p"):
    return {"v": 1, "iss": iss.pub, "grant": idof(held), "minter": minter.pub, "to": to.pub,
            "template": template if template is not None else
            {"ttl": 3600, "depth": 1, "images": [I1], "ceilings": {"Cpu": 10 ** 8},
             "caveats": TEMPLATE_CAVEATS},
            "max": max_, "rate": rate if rate is not None else {"n": 2, "per": 60},
            "events": events if events is not None else ["event:deploy", "every:3600"],
            "iat": iat, "exp": exp, "nonce": nonce(label)}


def policy(iss, held, minter, to, **kw):
    return envelope("policy", policy_payload(iss, held, minter, to, **kw), iss)


def minted(pol_env, held_env, minter=M, to=B, iat=NOW - 10, ttl=3600, **kw):
    """A child minted under pol_env, at the template's bounds unless kw says."""
    t = _p(pol_env)["template"]
    args = dict(depth=t["depth"], images=t["images"], ceilings=t["ceilings"], caveats=t["caveats"],
                iat=iat, exp=iat + ttl, label=("minted", repr(sorted(kw.items())), iat))
    args.update(kw)
    return grant(minter, to, parent=idof(held_env), policy=idof(pol_env), **args)


def _p(env):
    return cbor_decode(_payload(env), "")


def invocation(key, gn, image=I1, model="llama-3", iat=NOW, label="inv", **extra):
    p = {"v": 1, "iss": key.pub, "grant": idof(gn), "iat": iat, "nonce": nonce(label)}
    if image is not None:
        p["image"] = image
    if model is not None:
        p["model"] = model
    p.update(extra)
    return envelope("invocation", p, key)


def amendment(key, g, seq=1, exp=None, images=None, ceilings=None, caveats=None, iat=NOW):
    gp = _p(g)
    p = {"v": 1, "iss": key.pub, "grant": idof(g), "seq": seq, "iat": iat,
         "exp": gp["exp"] if exp is None else exp, "images": gp["images"] if images is None else images,
         "ceilings": gp["ceilings"] if ceilings is None else ceilings,
         "caveats": gp["caveats"] if caveats is None else caveats}
    return envelope("amendment", p, key)


def revocation(key, g):
    return envelope("revocation", {"v": 1, "iss": key.pub, "grant": idof(g), "iat": NOW}, key)


def checkpoint(key, g, seq=1):
    return envelope("checkpoint", {"v": 1, "iss": key.pub, "grant": idof(g), "run": blake3(b"run %d" % seq),
                                   "seq": seq, "iat": NOW}, key)


def resign(env, key, mutate_payload_bytes):
    """The envelope with its payload bytes changed by `mutate_payload_bytes`
    and signed again (so only the payload's form is wrong)."""
    d = cbor_decode(env, "").value
    return envelope(None, None, key, prot=d[0], payload_bytes=mutate_payload_bytes(d[2]))


# =============================================================================
# Ledger lines (canonical JSON, jcp.md §7)
# =============================================================================
def line(**members):
    return jcp.jcs(members)


def admit(env):
    return line(op="admit", token=b64(env))


def reserve(n, path, uj, inv, at_s=NOW, until_s=NOW + 3600):
    return line(op="reserve", n=n, path=["b3:" + idof(g).hex() for g in path], uj=uj,
                inv="b3:" + blake3(b"inv %s" % str(inv).encode()).hex(),
                at=str(at_s * 10 ** 9), until=str(until_s * 10 ** 9))


def post(n, uj):
    return line(op="post", n=n, uj=uj, run="b3:" + blake3(b"run %d" % n).hex())


def release(n, why="failed"):
    return line(op="release", n=n, why=why)


def mint_line(env, at_s=NOW, event="event:deploy"):
    return line(op="mint", token=b64(env), event=event, at=str(at_s * 10 ** 9))


# =============================================================================
# The cases
# =============================================================================
def cbor_hex(s):
    return bytes.fromhex(s)


def chain_cases():
    """kind "chain": §2 envelope and payload codes, §3.2 widenings, §4 links and times."""
    cs = []

    def case(name, about, chain, expect, kind="chain"):
        cs.append({"name": name, "about": about, "kind": kind, "chain": [b64(e) for e in chain], "expect": expect})

    case("chain-3-deep", "a valid root and two narrower delegations", [G0, G1, G2], "ok")
    case("chain-root-only", "a root grant alone", [G0], "ok")
    # §3.2, one term each
    g0d0 = grant(ROOT, A, depth=0, label="g0 depth 0")
    case("depth-exhausted", "a delegation below a grant of depth 0",
         [g0d0, child_of(g0d0, A, B, depth=0)], "depth-exhausted")
    case("widen-depth", "a child whose depth is its parent's", [G0, child_of(G0, A, B, depth=3)], "widen-depth")
    case("widen-images", "a child with an image the parent lacks", [G0, child_of(G0, A, B, images=[I1, I3])], "widen-images")
    case("widen-ceiling-value", "a child Cpu ceiling above the parent's",
         [G0, child_of(G0, A, B, ceilings={"Cpu": 10 ** 9 + 1})], "widen-ceiling")
    case("widen-ceiling-class", "a child with a class (Npu) the parent has no ceiling for",
         [G0, child_of(G0, A, B, ceilings={"Cpu": 1, "Npu": 1})], "widen-ceiling")
    case("widen-expiry", "a child that outlives its parent", [G0, child_of(G0, A, B, exp=NOW + DAY + 1)], "widen-expiry")
    case("widen-models-absent", "the parent restricts models, the child drops the caveat",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, models=None))], "widen-models")
    case("widen-models-extra", "a child model outside the parent's set",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, models=["gpt-x", "llama-3"]))], "widen-models")
    case("widen-tiers", "a child tier outside the parent's set",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, tiers=["S1", "S7"]))], "widen-tiers")
    hosts_bad = {
        "absent": None,
        "other-domain": ["*.example.com:443", "api.other.org:443"],
        "portless": ["*.example.com", "10.0.0.0/8"],
        "apex-under-wildcard": ["example.com:443"],
        "wider-prefix": ["10.0.0.0/7"],
        "ip-outside": ["11.0.0.1"],
        "ip-outside-prefix": ["192.168.0.1:443"],
        "wildcard-wider": ["*.com:443"],
    }
    for n, h in hosts_bad.items():
        case("widen-hosts-" + n, "hosts %r under %r" % (h, ROOT_CAVEATS["hosts"]),
             [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, hosts=h))], "widen-hosts")
    hosts_ok = {
        "name-under-wildcard": ["api.example.com:443"],
        "deeper-wildcard": ["*.eu.example.com:443"],
        "ip-in-prefix-any-port": ["10.2.3.4:8080"],
        "longer-prefix": ["10.1.0.0/16"],
    }
    for n, h in hosts_ok.items():
        case("narrow-hosts-" + n, "hosts %r under %r" % (h, ROOT_CAVEATS["hosts"]),
             [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, hosts=h))], "ok")
    case("widen-paths", "/database is not below /data",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, paths=["/database"]))], "widen-paths")
    case("narrow-paths", "/data/sub is below /data",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, paths=["/data/sub"]))], "ok")
    case("widen-runs", "a child runs above the parent's",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, runs=101))], "widen-runs")
    case("widen-runs-absent", "the parent counts runs, the child drops the caveat",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, runs=None))], "widen-runs")
    case("widen-rate-n", "a child rate n above the parent's",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, rate={"n": 11, "per": 60}))], "widen-rate")
    case("widen-rate-per", "a child rate window shorter than the parent's",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, rate={"n": 10, "per": 59}))], "widen-rate")
    case("widen-order", "widens ceilings and tiers: ceilings come first in §3.2",
         [G0, child_of(G0, A, B, ceilings={"Cpu": 2 * 10 ** 9}, caveats=narrow(ROOT_CAVEATS, tiers=["S7"]))],
         "widen-ceiling")
    # §4 links
    case("wrong-issuer", "G1 signed by a key that is not G0's audience",
         [G0, child_of(G0, X, B)], "wrong-issuer")
    case("untrusted-root", "a root issued by a key not among the roots",
         [grant(OTHER, A, label="other root")], "untrusted-root")
    case("broken-chain-loop", "the same grant twice: the second's parent is not the first", [G0, G0], "broken-chain")
    case("broken-chain-parent", "G2 after G0, skipping G1", [G0, G2], "broken-chain")
    case("broken-chain-root-parent", "a first grant with a parent", [G1, G2], "broken-chain")
    case("chain-depth-65", "65 elements", [G0] * 65, "chain-depth")
    case("chain-depth-0", "no elements", [], "chain-depth")
    # §4 step 5
    case("expired", "G1 expired before now",
         [G0, child_of(G0, A, B, iat=NOW - 1000, exp=NOW)], "expired")
    case("not-yet", "G1 issued more than 300 s after now",
         [G0, child_of(G0, A, B, iat=NOW + 301, exp=NOW + 1000)], "not-yet")
    case("not-yet-skew-ok", "G1 issued 300 s after now: within the skew",
         [G0, child_of(G0, A, B, iat=NOW + 300, exp=NOW + 1000)], "ok")
    # jcp.md §4: element by element (this suite first read it step by step).
    case("element-order", "a widening at G1 and a broken link at G2: G1's widening first",
         [G0, child_of(G0, A, B, images=[I1, I3]), G2], "widen-images")
    # §3.1 / §2 payload
    case("unknown-critical", "a caveat name outside the closed set",
         [G0, child_of(G0, A, B, caveats=narrow(ROOT_CAVEATS, zzz=1))], "unknown-critical")
    case("non-canonical-zero-parent", "an optional address (parent) written all zero",
         [grant(ROOT, A, parent=bytes(32), label="zero parent")], "non-canonical")
    case("non-canonical-runs-0", "an optional caveat (runs) written as 0",
         [grant(ROOT, A, caveats=narrow(ROOT_CAVEATS, runs=0), label="runs 0")], "non-canonical")
    case("non-canonical-empty-models", "an optional caveat written as the empty set",
         [grant(ROOT, A, caveats=narrow(ROOT_CAVEATS, models=[]), label="models []")], "non-canonical")
    case("payload-non-shortest", "payload v: 1 written 0x1801 (re-signed)",
         [resign(G0, ROOT, lambda b: b.replace(b"\x61v\x01", b"\x61v\x18\x01"))], "cbor-non-shortest")
    case("payload-unsorted-keys", "payload keys swapped (re-signed)",
         [resign(G0, ROOT, swap_first_keys)], "cbor-unsorted-keys")
    case("payload-indefinite", "payload map of indefinite length (re-signed)",
         [resign(G0, ROOT, lambda b: b"\xbf" + strip_map_head(b) + b"\xff")], "cbor-indefinite")
    case("payload-duplicate-key", "payload with v twice (re-signed)",
         [resign(G0, ROOT, dup_first_key)], "duplicate-key")
    case("payload-trailing", "a byte after the payload map (re-signed)",
         [resign(G0, ROOT, lambda b: b + b"\x00")], "malformed")
    case("unknown-field", "a payload member zzz",
         [envelope("grant", dict(grant_payload(ROOT, A, label="zzz"), zzz=1), ROOT)], "unknown-field")
    gp = grant_payload(ROOT, A, label="no nonce")
    del gp["nonce"]
    case("missing-field", "a grant without its nonce", [envelope("grant", gp, ROOT)], "missing-field")
    # jcp.md §2 step 10 (canonical.md): a value of the wrong type or length is invalid.
    case("invalid-type", "depth as a text string",
         [envelope("grant", grant_payload(ROOT, A, depth="3", label="depth text"), ROOT)], "invalid")
    case("invalid-nonce-size", "a 15-byte nonce",
         [envelope("grant", dict(grant_payload(ROOT, A, label="n15"), nonce=bytes(15)), ROOT)], "invalid")
    case("invalid-version", "v 2", [envelope("grant", dict(grant_payload(ROOT, A, label="v2"), v=2), ROOT)], "invalid")
    # jcp.md §2 step 10g (canonical.md): a set out of order or repeated is non-canonical.
    case("non-canonical-images-order", "images out of order",
         [grant(ROOT, A, images=[I2, I1], label="unsorted")], "non-canonical")
    case("non-canonical-images-repeat", "an image twice", [grant(ROOT, A, images=[I1, I1], label="repeat")], "non-canonical")
    case("invalid-exp", "exp not after iat", [grant(ROOT, A, iat=NOW, exp=NOW, label="exp=iat")], "invalid")
    case("invalid-class", "a ceiling for class Fpga", [grant(ROOT, A, ceilings={"Fpga": 1}, label="fpga")], "invalid")
    case("invalid-ceiling-zero", "a ceiling of 0", [grant(ROOT, A, ceilings={"Cpu": 0}, label="c0")], "invalid")
    case("invalid-depth", "depth 65", [grant(ROOT, A, depth=65, label="d65")], "invalid")
    case("invalid-tier", "tier S8", [grant(ROOT, A, caveats=narrow(ROOT_CAVEATS, tiers=["S8"]), label="S8")], "invalid")
    case("invalid-host", "a host pattern in upper case",
         [grant(ROOT, A, caveats=narrow(ROOT_CAVEATS, hosts=["API.example.com"]), label="upper")], "invalid")
    case("invalid-path", "a path that is not clean",
         [grant(ROOT, A, caveats=narrow(ROOT_CAVEATS, paths=["/data/../etc"]), label="dotdot")], "invalid")
    case("invalid-element", "an invocation inside a chain", [G0, invocation(A, G0)], "invalid")
    # §2 envelope (receipt.md order)
    case("signature-flipped", "one bit of G1's signature flipped", [G0, flip_sig(G1)], "signature")
    case("signature-s-plus-l", "G1's S replaced by S + L", [G0, s_plus_l(G1)], "signature")
    case("signature-63", "G1's signature without its last byte", [G0, G1[:-66] + b"\x58\x3f" + G1[-64:-1]], "signature")
    ident = (1).to_bytes(32, "little")
    weak = envelope("grant", dict(grant_payload(ROOT, A, label="weak"), iss=ident), None, kid=blake3(ident),
                    sig=jcp.point_encode(jcp.BASE) + (1).to_bytes(32, "little"))
    case("weak-key", "a root issued by the identity point (R = B, S = 1 verifies for any message)", [weak], "weak-key")
    noncanon = (jcp.P + 1).to_bytes(32, "little")  # y = p + 1: a non-canonical encoding of y = 1
    case("weak-key-non-canonical", "an issuer key with y ≥ p",
         [envelope("grant", dict(grant_payload(ROOT, A, label="y>=p"), iss=noncanon), None, kid=blake3(noncanon),
                   sig=bytes(64))], "weak-key")
    case("header-kid", "kid is not the id of iss",
         [envelope("grant", grant_payload(ROOT, A, label="kid"), ROOT, kid=A.kid)], "header")
    case("header-content-type", "the receipt content type on a grant",
         [envelope("grant", grant_payload(ROOT, A, label="ct"), ROOT,
                   prot={1: -8, 3: "application/jcr-1+cbor", 4: ROOT.kid})], "header")
    case("header-extra-label", "protected label 5",
         [envelope("grant", grant_payload(ROOT, A, label="l5"), ROOT,
                   prot={1: -8, 3: CT["grant"], 4: ROOT.kid, 5: b"x"})], "header")
    case("header-unprotected", "a non-empty unprotected header",
         [envelope("grant", grant_payload(ROOT, A, label="unprot"), ROOT, unprot={4: ROOT.kid})], "header")
    case("header-crit", "protected crit",
         [envelope("grant", grant_payload(ROOT, A, label="crit"), ROOT,
                   prot={1: -8, 2: [99], 3: CT["grant"], 4: ROOT.kid})], "unknown-critical")
    case("alg-es256", "alg -7", [envelope("grant", grant_payload(ROOT, A, label="es256"), ROOT, alg=-7)], "alg")
    case("alg-ed25519", "alg -19 is accepted",
         [envelope("grant", grant_payload(ROOT, A, label="-19"), ROOT, alg=-19)], "ok")
    case("untagged", "the COSE_Sign1 array without tag 18", [G0[1:]], "malformed")
    case("truncated", "the envelope without its last 10 bytes", [G0[:-10]], "truncated")
    case("envelope-non-shortest", "the envelope's signature length written 0x5900 0x40",
         [G0[:-66] + b"\x59\x00\x40" + G0[-64:]], "cbor-non-shortest")
    return cs


def swap_first_keys(b):
    """Swap the first two entries of a payload map (keys "v" and "iss"? no:
    the first two in encoded order): decode the raw entries and re-join."""
    entries = raw_entries(b)
    entries[0], entries[1] = entries[1], entries[0]
    return b[:map_head_len(b)] + b"".join(k + v for k, v in entries)


def dup_first_key(b):
    entries = raw_entries(b)
    n = len(entries) + 1
    head = bytes([0xa0 | n]) if n < 24 else b"\xb8" + bytes([n])
    return head + entries[0][0] + entries[0][1] + b"".join(k + v for k, v in entries)


def map_head_len(b):
    ai = b[0] & 31
    return 1 if ai < 24 else 1 + (1 << (ai - 24))


def strip_map_head(b):
    return b[map_head_len(b):]


def raw_entries(b):
    """The (key bytes, value bytes) of a canonical map, in order."""
    m = cbor_decode(b, "")
    out = []
    for k, v in m.items():
        out.append((cbor_encode(k), cbor_encode(v)))
    return sorted(out)


def flip_sig(env):
    return env[:-10] + bytes([env[-10] ^ 1]) + env[-9:]


def s_plus_l(env):
    s = int.from_bytes(env[-32:], "little") + jcp.L
    return env[:-32] + s.to_bytes(32, "little")


ASK = {"image": "b3:" + I1.hex(), "tier": "S1", "classes": {"Cpu": 10 ** 6}, "hosts": ["api.example.com:443"], "paths": ["/data/in/x"],
       "model": "llama-3"}


def decision_cases():
    """kind "decision": §5 with an empty ledger."""
    cs = []

    def case(name, about, expect, inv=None, ask=None, chain=(G0, G1, G2)):
        cs.append({"name": name, "about": about, "kind": "decision", "chain": [b64(e) for e in chain],
                   "invocation": b64(inv if inv is not None else invocation(C, G2)),
                   "ask": dict(ASK, **(ask or {})), "expect": expect})

    case("decide-ok", "a run within every grant of the chain", "ok")
    case("decide-image", "an image only G0 and G1 grant", "image-not-granted", inv=invocation(C, G2, image=I2, label=2))
    case("decide-model", "a model G1 does not grant", "model-not-granted", inv=invocation(C, G2, model="mistral-7b", label=3))
    case("decide-model-absent", "G1 restricts models, the invocation names none", "model-not-granted",
         inv=invocation(C, G2, model=None, label=4), ask={"model": None})
    case("decide-tier", "tier S3: G0 grants it, G1 does not", "tier-not-granted", ask={"tier": "S3"})
    case("decide-host", "a destination outside G2's hosts", "host-not-granted", ask={"hosts": ["www.example.com:443"]})
    case("decide-host-port", "the right name on another port", "host-not-granted", ask={"hosts": ["api.example.com:80"]})
    case("decide-path", "a path outside /data/in", "path-not-granted", ask={"paths": ["/data/out"]})
    case("decide-class", "a Gpu budget: G2 has no Gpu ceiling", "class-not-granted",
         ask={"classes": {"Cpu": 1, "Gpu": 1}})
    case("decide-undeclared", "Cpu used with a budget of 0", "ceiling-undeclared", ask={"classes": {"Cpu": 0}})
    case("decide-over-ceiling", "a Cpu budget above G2's ceiling", "over-ceiling", ask={"classes": {"Cpu": 10 ** 8 + 1}})
    case("decide-at-ceiling", "a Cpu budget exactly G2's ceiling", "ok", ask={"classes": {"Cpu": 10 ** 8}})
    case("decide-image-from-ask", "no image in the invocation; the ask's (the unit's) is granted", "ok",
         inv=invocation(C, G2, image=None, label=10), ask={"image": "b3:" + I1.hex()})
    case("decide-image-mismatch", "the invocation names one image, the run runs another", "image-not-granted",
         inv=invocation(C, G2, label=11), ask={"image": "b3:" + I2.hex()})
    case("decide-image-ungranted", "no image in the invocation; the run's (image 3) no grant names", "image-not-granted",
         inv=invocation(C, G2, image=None, label=12), ask={"image": "b3:" + I3.hex()})
    case("decide-stale", "an invocation 301 s old", "stale-invocation", inv=invocation(C, G2, iat=NOW - 301, label=5))
    case("decide-future", "an invocation 301 s ahead", "stale-invocation", inv=invocation(C, G2, iat=NOW + 301, label=6))
    case("decide-wrong-audience", "an invocation by G2's issuer, not its audience", "wrong-audience",
         inv=invocation(B, G2, label=7))
    case("decide-broken-chain", "an invocation citing G1, not the last grant", "broken-chain",
         inv=invocation(C, G1, label=8))
    case("decide-chain-first", "an expired chain and a stale invocation: the chain first", "expired",
         inv=invocation(C, G2, iat=NOW - 1000, label=9),
         chain=[G0, child_of(G0, A, B, iat=NOW - 1000, exp=NOW - 1)])
    case("decide-step-order", "tier S3 refused by G1, a Gpu class refused by G2: step 4 before step 6",
         "tier-not-granted", ask={"tier": "S3", "classes": {"Cpu": 1, "Gpu": 1}})
    return cs


def amendment_cases():
    """kind "amendment": §8 applied to the chain's last grant."""
    cs = []

    def case(name, about, amends, expect, chain=(G0, G1)):
        cs.append({"name": name, "about": about, "kind": "amendment", "chain": [b64(e) for e in chain],
                   "amendments": [b64(a) for a in amends], "expect": expect})

    case("amend-ok", "G1's issuer lowers its Cpu ceiling", [amendment(A, G1, ceilings={"Cpu": 10 ** 8, "Gpu": 10 ** 8})], "ok")
    case("amend-ok-twice", "two tightenings, seq 1 then 5",
         [amendment(A, G1, seq=1, ceilings={"Cpu": 2 * 10 ** 8, "Gpu": 10 ** 8}),
          amendment(A, G1, seq=5, ceilings={"Cpu": 10 ** 8})], "ok")
    case("amend-not-issuer", "G1's audience amends its own grant", [amendment(B, G1)], "amend-not-issuer")
    case("amend-not-issuer-other", "a stranger amends G1", [amendment(X, G1)], "amend-not-issuer")
    g1self = child_of(G0, A, A, label="self")
    case("amend-not-issuer-self-grant", "a grant whose issuer is its audience is never amended",
         [amendment(A, g1self)], "amend-not-issuer", chain=(G0, g1self))
    case("amend-widens-ceiling", "a Cpu ceiling above the grant's",
         [amendment(A, G1, ceilings={"Cpu": 5 * 10 ** 8 + 1, "Gpu": 10 ** 8})], "amend-widens")
    case("amend-widens-effective", "back up after a tightening: wider than the effective terms, not the grant",
         [amendment(A, G1, seq=1, ceilings={"Cpu": 10 ** 8}),
          amendment(A, G1, seq=2, ceilings={"Cpu": 2 * 10 ** 8})], "amend-widens")
    case("amend-widens-expiry", "a later exp", [amendment(A, G1, exp=NOW + DAY)], "amend-widens")
    case("amend-widens-hosts", "a host outside the grant's",
         [amendment(A, G1, caveats=narrow(G1_CAVEATS, hosts=["api.other.org:443"]))], "amend-widens")
    case("amend-stale", "seq 2 after seq 2",
         [amendment(A, G1, seq=2, ceilings={"Cpu": 10 ** 8, "Gpu": 10 ** 8}),
          amendment(A, G1, seq=2, ceilings={"Cpu": 10 ** 7})], "amend-stale")
    case("amend-wrong-grant", "an amendment of G0 applied to G1", [amendment(ROOT, G0)], "broken-chain")
    return cs


# ---- standing grants ----------------------------------------------------------
P0 = policy(A, G0, M, B)
MINT1 = minted(P0, G0)


def mint_cases():
    """kind "mint" (standing.json): §4 with a policy element, §6."""
    cs = []

    def case(name, about, chain, expect):
        cs.append({"name": name, "about": about, "kind": "mint", "chain": [b64(e) for e in chain], "expect": expect})

    case("mint-ok", "a child minted under a policy of G0's holder", [G0, P0, MINT1], "ok")
    case("mint-ok-narrower", "a child narrower than the template",
         [G0, P0, minted(P0, G0, ceilings={"Cpu": 10}, depth=0, ttl=60)], "ok")
    case("mint-wrong-issuer-child", "the child signed by the holder, not the minter",
         [G0, P0, minted(P0, G0, minter=A)], "wrong-issuer")
    p_by_x = policy(X, G0, M, B)
    case("mint-wrong-issuer-policy", "a policy signed by someone not G0's audience",
         [G0, p_by_x, minted(p_by_x, G0)], "wrong-issuer")
    case("mint-wrong-audience", "the child for someone other than `to`",
         [G0, P0, minted(P0, G0, to=C)], "wrong-audience")
    case("mint-ttl", "a child living longer than iat + ttl", [G0, P0, minted(P0, G0, ttl=3601)], "widen-expiry")
    case("mint-widen-ceiling", "a child above the template's Cpu",
         [G0, P0, minted(P0, G0, ceilings={"Cpu": 10 ** 8 + 1})], "widen-ceiling")
    case("mint-widen-images", "a child with an image the template lacks",
         [G0, P0, minted(P0, G0, images=[I1, I2])], "widen-images")
    case("mint-widen-tiers", "a child without the template's tiers",
         [G0, P0, minted(P0, G0, caveats=narrow(TEMPLATE_CAVEATS, tiers=None))], "widen-tiers")
    case("mint-widen-depth", "a child deeper than the template", [G0, P0, minted(P0, G0, depth=2)], "widen-depth")
    p_wide = policy(A, G0, M, B, template={"ttl": 60, "depth": 1, "images": [I1], "ceilings": {"Cpu": 2 * 10 ** 9},
                                           "caveats": {}}, label="wide")
    case("mint-template-widens", "a template above the held grant's Cpu ceiling",
         [G0, p_wide, minted(p_wide, G0, ceilings={"Cpu": 1}, caveats=dict(ROOT_CAVEATS))], "widen-ceiling")
    p_late = policy(A, G0, M, B, exp=NOW + DAY + 1, label="late")
    case("mint-policy-outlives", "a policy that outlives the held grant",
         [G0, p_late, minted(p_late, G0)], "widen-expiry")
    case("mint-policy-not-before", "a minted grant with no policy element before it", [G0, MINT1], "broken-chain")
    case("mint-policy-other", "a minted grant citing another policy than the one before it",
         [G0, policy(A, G0, M, B, label="other"), MINT1], "broken-chain")
    p_g1 = policy(B, G1, M, C, label="of g1")
    case("mint-policy-grant", "a policy for G1 standing after G0", [G0, p_g1, minted(p_g1, G0, to=C)], "broken-chain")
    case("mint-policy-unused", "a policy before a grant not minted under it", [G0, P0, G1], "broken-chain")
    case("mint-policy-last", "a policy as the last element (jcp.md §4)", [G0, P0], "broken-chain")
    case("mint-policy-expired", "a policy that expired", [G0, policy(A, G0, M, B, iat=NOW - 100, exp=NOW, label="exp")]
         + [minted(policy(A, G0, M, B, iat=NOW - 100, exp=NOW, label="exp"), G0, iat=NOW - 100, ttl=100)], "expired")
    p_bad_event = policy(A, G0, M, B, events=["cron:5"], label="ev")
    case("mint-policy-event", "an event that is not event:, pool-claim: or every:",
         [G0, p_bad_event, minted(p_bad_event, G0)], "invalid")
    return cs


def ledger_cases():
    """kind "ledger": §7 replay, §8 in the ledger."""
    cs = []

    def case(name, about, lines, expect):
        cs.append({"name": name, "about": about, "kind": "ledger", "ledger": lines, "expect": expect})

    base = [admit(G0), admit(G1), admit(G2)]
    path = [G2, G1, G0]
    cpu = lambda n: {"Cpu": n}  # noqa: E731
    case("ledger-ok", "admit, reserve, post, reserve, release",
         base + [reserve(1, path, cpu(10 ** 6), 1), post(1, cpu(9 * 10 ** 5)),
                 reserve(2, path, cpu(10 ** 6), 2), release(2, "failed")], "ok")
    case("ledger-over-ceiling", "two reservations that together pass G2's ceiling",
         base + [reserve(1, path, cpu(6 * 10 ** 7), 1), reserve(2, path, cpu(5 * 10 ** 7), 2)], "over-ceiling")
    case("ledger-over-ceiling-spent", "the post counts as spent: 9e7 spent then 2e7 more",
         base + [reserve(1, path, cpu(10 ** 7), 1), post(1, cpu(9 * 10 ** 7)), reserve(2, path, cpu(2 * 10 ** 7), 2)],
         "over-ceiling")
    g1b = child_of(G1, B, X, ceilings={"Cpu": 5 * 10 ** 8}, caveats=G2_CAVEATS, images=[I1], label="sibling")
    case("ledger-over-ceiling-shared", "two siblings under G1, each within its own ceiling, together over G1's",
         base + [admit(g1b), reserve(1, path, cpu(10 ** 8), 1), reserve(2, [g1b, G1, G0], cpu(4 * 10 ** 8 + 1), 2)],
         "over-ceiling")
    case("ledger-released-frees", "a released reservation frees its budget",
         base + [reserve(1, path, cpu(10 ** 8), 1), release(1), reserve(2, path, cpu(10 ** 8), 2)], "ok")
    case("ledger-double-spend-post", "a reservation posted twice",
         base + [reserve(1, path, cpu(10), 1), post(1, cpu(5)), post(1, cpu(5))], "double-spend")
    case("ledger-double-spend-release", "released after it was posted",
         base + [reserve(1, path, cpu(10), 1), post(1, cpu(5)), release(1, "refused")], "double-spend")
    case("ledger-replay", "the same invocation reserved twice",
         base + [reserve(1, path, cpu(10), 7), reserve(2, path, cpu(10), 7)], "replay")
    case("ledger-n-gap", "reservation numbers that skip", base + [reserve(2, path, cpu(10), 1)], "invalid")
    case("ledger-path-not-root", "a path that stops before the root", base + [reserve(1, [G2, G1], cpu(10), 1)],
         "broken-chain")
    case("ledger-path-unadmitted", "a path through a grant never admitted",
         [admit(G0), admit(G1), reserve(1, path, cpu(10), 1)], "broken-chain")
    case("ledger-path-order", "a path root first", base + [reserve(1, [G0, G1, G2], cpu(10), 1)], "broken-chain")
    case("ledger-class", "a Gpu reservation under G2 (no Gpu ceiling)", base + [reserve(1, path, {"Gpu": 1}, 1)],
         "class-not-granted")
    case("ledger-untrusted-root", "admit a root of an untrusted key", [admit(grant(OTHER, A, label="o"))],
         "untrusted-root")
    case("ledger-admit-orphan", "admit G1 before G0", [admit(G1)], "broken-chain")
    case("ledger-admit-widens", "admit a child wider than its parent",
         [admit(G0), admit(child_of(G0, A, B, ceilings={"Cpu": 2 * 10 ** 9}))], "widen-ceiling")
    case("ledger-admit-wrong-issuer", "admit a child signed by a stranger", [admit(G0), admit(child_of(G0, X, B))],
         "wrong-issuer")
    case("ledger-admit-no-time", "an expired chain still admits (no time checks)",
         [admit(G0), admit(child_of(G0, A, B, iat=NOW - 1000, exp=NOW - 500))], "ok")
    case("ledger-revoked", "G1 revoked by its issuer, then a reservation through it",
         base + [line(op="revoke", token=b64(revocation(A, G1))), reserve(1, path, cpu(10), 1)], "revoked")
    case("ledger-revoked-by-ancestor", "G2 revoked by the root (an ancestor's issuer)",
         base + [line(op="revoke", token=b64(revocation(ROOT, G2))), reserve(1, path, cpu(10), 1)], "revoked")
    case("ledger-revoke-wrong-issuer", "G1 revoked by its audience (who issued only G2)",
         base + [line(op="revoke", token=b64(revocation(B, G1)))], "wrong-issuer")
    case("ledger-revoke-leaf-only", "G2 revoked; a reservation whose path stops at G1 is not",
         base + [line(op="revoke", token=b64(revocation(B, G2))), reserve(1, [G1, G0], cpu(10), 1)], "ok")
    # runs and rate: G2 runs 20, G1 rate n 5 per 120
    g_runs = child_of(G1, B, C, images=[I1], ceilings={"Cpu": 10 ** 8}, caveats=narrow(G2_CAVEATS, runs=2), label="runs2")
    pr = [g_runs, G1, G0]
    case("ledger-runs-exhausted", "a third run under runs 2",
         [admit(G0), admit(G1), admit(g_runs), reserve(1, pr, cpu(1), 1, NOW), reserve(2, pr, cpu(1), 2, NOW + 1000),
          reserve(3, pr, cpu(1), 3, NOW + 2000)], "runs-exhausted")
    case("ledger-runs-refused-uncounted", "a reservation released as refused does not count",
         [admit(G0), admit(G1), admit(g_runs), reserve(1, pr, cpu(1), 1, NOW), release(1, "refused"),
          reserve(2, pr, cpu(1), 2, NOW + 1000), reserve(3, pr, cpu(1), 3, NOW + 2000)], "ok")
    case("ledger-runs-failed-counted", "a reservation released as failed still counts",
         [admit(G0), admit(G1), admit(g_runs), reserve(1, pr, cpu(1), 1, NOW), release(1, "failed"),
          reserve(2, pr, cpu(1), 2, NOW + 1000), reserve(3, pr, cpu(1), 3, NOW + 2000)], "runs-exhausted")
    rs = [reserve(i, path, cpu(1), i, NOW + 10 * i) for i in range(1, 6)]
    case("ledger-rate-exceeded", "a sixth run within G1's 120 s (rate 5 per 120)",
         base + rs + [reserve(6, path, cpu(1), 6, NOW + 100)], "rate-exceeded")
    case("ledger-rate-window", "a sixth run 120 s after the first: outside the window",
         base + rs + [reserve(6, path, cpu(1), 6, NOW + 10 + 120)], "ok")
    # amendments in the ledger
    case("ledger-amend-lowers", "G1's Cpu lowered to 1e6: a 2e6 reservation is over",
         base + [line(op="amend", token=b64(amendment(A, G1, ceilings={"Cpu": 10 ** 6}))),
                 reserve(1, path, cpu(2 * 10 ** 6), 1)], "over-ceiling")
    case("ledger-amend-drops-class", "G1's Gpu ceiling dropped: a Gpu reservation at G1 is class-not-granted",
         base + [line(op="amend", token=b64(amendment(A, G1, ceilings={"Cpu": 10 ** 6}))),
                 reserve(1, [G1, G0], {"Gpu": 1}, 1)], "class-not-granted")
    case("ledger-amend-not-issuer", "G1 amended by its audience",
         base + [line(op="amend", token=b64(amendment(B, G1)))], "amend-not-issuer")
    case("ledger-amend-stale", "seq 1 twice",
         base + [line(op="amend", token=b64(amendment(A, G1))), line(op="amend", token=b64(amendment(A, G1)))],
         "amend-stale")
    case("ledger-amend-widens", "an amendment raising G1's Cpu",
         base + [line(op="amend", token=b64(amendment(A, G1, ceilings={"Cpu": 10 ** 9})))], "amend-widens")
    # checkpoints
    case("ledger-checkpoint", "checkpoints 1 and 2 by G2's audience",
         base + [line(op="checkpoint", token=b64(checkpoint(C, G2, 1))),
                 line(op="checkpoint", token=b64(checkpoint(C, G2, 2)))], "ok")
    case("ledger-checkpoint-audience", "a checkpoint by G2's issuer",
         base + [line(op="checkpoint", token=b64(checkpoint(B, G2, 1)))], "wrong-audience")
    case("ledger-checkpoint-seq", "checkpoint 2 then 1",
         base + [line(op="checkpoint", token=b64(checkpoint(C, G2, 2))),
                 line(op="checkpoint", token=b64(checkpoint(C, G2, 1)))], "invalid")
    # the lines themselves (canonical.md)
    good = reserve(1, path, cpu(10), 1)
    case("ledger-line-whitespace", "a space after a colon", base + [good.replace('":', '": ', 1)], "non-canonical")
    case("ledger-line-order", "members out of order", base + ['{"path":[],"op":"reserve"}'], "non-canonical")
    case("ledger-line-duplicate", "a member twice", base + ['{"n":1,"n":1,"op":"release","why":"failed"}'],
         "duplicate-key")
    case("ledger-line-float", "a reservation number 1.0", base + ['{"n":1.0,"op":"release","why":"failed"}'], "float")
    case("ledger-line-int-range", "a µJ figure of 2^53", base + [reserve(1, path, cpu(2 ** 53), 1)], "int-range")
    case("ledger-line-malformed", "not JSON", base + ["{op}"], "malformed")
    case("ledger-line-unknown-op", "op delete", base + [line(op="delete")], "invalid")
    case("ledger-line-unknown-field", "a reserve with a member zzz", base + [good[:-1] + ',"zzz":1}'], "unknown-field")
    case("ledger-line-missing-field", "a release without why", base + [line(op="release", n=1)], "missing-field")
    case("ledger-ns-number", "at as a JSON number rather than a string",
         base + [good.replace('"at":"%d"' % (NOW * 10 ** 9), '"at":%d' % NOW)], "invalid")
    case("ledger-token-not-grant", "admit an invocation", base + [admit(invocation(C, G2))], "invalid")
    case("ledger-token-bad-signature", "admit G1 with a flipped signature", [admit(G0), admit(flip_sig(G1))],
         "signature")
    return cs


def standing_ledger_cases():
    """kind "ledger" about standing grants (standing.json): mints, max, rate."""
    cs = []

    def case(name, about, lines, expect):
        cs.append({"name": name, "about": about, "kind": "ledger", "ledger": lines, "expect": expect})

    base = [admit(G0), admit(P0)]
    ms = [minted(P0, G0, iat=NOW + 100 * i, label=i) for i in range(5)]
    case("standing-mint-ok", "a mint, then a run reserved under the minted grant",
         base + [mint_line(ms[0]), reserve(1, [ms[0], G0], {"Cpu": 10 ** 6}, 1)], "ok")
    case("standing-max", "a fourth mint under max 3",
         base + [mint_line(m, NOW + 100 * i) for i, m in enumerate(ms[:4])], "runs-exhausted")
    case("standing-rate", "a third mint within 60 s (rate 2 per 60)",
         base + [mint_line(m, NOW + i) for i, m in enumerate(ms[:3])], "rate-exceeded")
    case("standing-rate-window", "three mints 61 s apart", base + [mint_line(m, NOW + 61 * i) for i, m in enumerate(ms[:3])],
         "ok")
    case("standing-policy-unadmitted", "a mint whose policy was never admitted", [admit(G0), mint_line(ms[0])],
         "broken-chain")
    case("standing-policy-wrong-issuer", "admit a policy signed by someone not G0's audience",
         [admit(G0), admit(policy(X, G0, M, B, label="x"))], "wrong-issuer")
    case("standing-policy-widens", "admit a policy whose template is above G0's Cpu",
         [admit(G0), admit(policy(A, G0, M, B, template={"ttl": 60, "depth": 1, "images": [I1],
                                                         "ceilings": {"Cpu": 2 * 10 ** 9}, "caveats": {}}, label="w"))],
         "widen-ceiling")
    case("standing-mint-wrong-issuer", "a mint signed by the holder, not the minter",
         base + [mint_line(minted(P0, G0, minter=A))], "wrong-issuer")
    case("standing-mint-wrong-audience", "a mint for someone other than `to`",
         base + [mint_line(minted(P0, G0, to=C))], "wrong-audience")
    case("standing-mint-ttl", "a mint past iat + ttl", base + [mint_line(minted(P0, G0, ttl=4000))], "widen-expiry")
    case("standing-mint-not-minted", "a mint entry carrying a grant without a policy",
         base + [mint_line(G1)], "broken-chain")
    case("standing-mint-twice", "the same child minted twice",
         base + [mint_line(ms[0]), mint_line(ms[0], NOW + 100)], "invalid")
    case("standing-mint-ceiling", "the minted grant's Cpu ceiling (the template's 1e8) holds: 1e8 reserved, then 1 more",
         base + [mint_line(ms[0]), reserve(1, [ms[0], G0], {"Cpu": 10 ** 8}, 1),
                 reserve(2, [ms[0], G0], {"Cpu": 1}, 2)], "over-ceiling")
    case("standing-revoked-policy", "a policy revoked by the holder, then a mint",
         base + [line(op="revoke", token=b64(revocation(A, P0))), mint_line(ms[0])], "revoked")
    return cs


# =============================================================================
# Checks on bytes this suite did not write
# =============================================================================
def check_foreign(fail):
    """The COSE WG Ed25519 example (Sig_structure and signature), the RFC 8949
    examples, dCBOR invalid cases that core-deterministic CBOR shares, and the
    JCR-1 receipts of conformance/v1 through the same envelope steps."""
    ex = json.load(open(os.path.join(REPO, "testdata/vectors/cose-wg-examples/eddsa-examples/eddsa-sig-01.json")))
    env = bytes.fromhex(ex["output"]["cbor"])
    d = cbor_decode(env, "cose-wg")
    prot, _, payload, sig = d.value
    tbs = cbor_encode(["Signature1", prot, b"", payload])
    if tbs.hex().upper() != ex["intermediates"]["ToBeSign_hex"]:
        fail("COSE WG eddsa-sig-01: the Sig_structure differs")
    try:
        jcp.check_signature(bytes.fromhex(ex["input"]["sign0"]["key"]["x_hex"]), tbs, sig, "cose-wg")
    except Reject as e:
        fail("COSE WG eddsa-sig-01: %s" % e)
    if ROOT.sign(tbs) != sig:
        fail("the signer here does not give COSE WG eddsa-sig-01's signature")
    if ROOT.sign(b"").hex() != jcp.RFC8032_TESTS[0][2]:
        fail("the signer here does not give RFC 8032 test 1's signature")

    core = json.load(open(os.path.join(REPO, "testdata/vectors/cbor/rfc8949-core-deterministic.json")))
    cbor_decode(bytes.fromhex(core["map_of_keys_to_empty_arrays"]["hex"]), "rfc8949")
    for f in core["floats"]:
        if cbor_decode(bytes.fromhex(f["hex"]), "rfc8949") != f["value"]:
            fail("RFC 8949 float %s" % f["hex"])
    keys = [bytes.fromhex(k["hex"]) for k in core["key_order"]]
    for i in range(len(keys) - 1):
        swapped = b"\xa2" + keys[i + 1] + b"\x80" + keys[i] + b"\x80"
        try:
            cbor_decode(swapped, "")
            fail("RFC 8949 key order: %s before %s accepted" % (keys[i + 1].hex(), keys[i].hex()))
        except Reject as e:
            if e.code != "cbor-unsorted-keys":
                fail("RFC 8949 key order: %s" % e)
    want = {"Not preferred encoding.": "cbor-non-shortest", "Not canonical NaN.": "cbor-non-shortest",
            "Duplicate string key.": "duplicate-key", "Duplicate integer key.": "duplicate-key",
            "Duplicate negative integer key.": "duplicate-key", "Duplicate boolean key.": "duplicate-key",
            "Duplicate key: empty array.": "duplicate-key", "Duplicate key: equal arrays.": "duplicate-key",
            "Keys out of order": "cbor-unsorted-keys"}
    n = 0
    for c in json.load(open(os.path.join(REPO, "testdata/vectors/cbor/dcbor-invalid.json"))):
        note = c.get("notes", "")
        code = "cbor-indefinite" if note.startswith("Streaming disallowed") else want.get(note)
        if code is None or c["diagnostic"].startswith("2("):   # bignum tags: dCBOR-only rule
            continue
        n += 1
        try:
            cbor_decode(bytes.fromhex(c["hex"]), "")
            fail("dCBOR %s accepted, want %s" % (c["diagnostic"], code))
        except Reject as e:
            if e.code != code:
                fail("dCBOR %s: %s, want %s" % (c["diagnostic"], e.code, code))
    # the JCR-1 receipts: the envelope steps 1-9 and 11-14 are the JCP profile's
    pack = os.path.join(REPO, "conformance", "v1")
    receipts = {"positive/run/receipt.cose": "ok", "positive/receipt-alg-ed25519.cose": "ok",
                "negative/receipt-flipped-signature.cose": "signature",
                "negative/receipt-signature-s-plus-l.cose": "signature",
                "negative/receipt-signature-63-bytes.cose": "signature",
                "negative/receipt-weak-key.cose": "weak-key", "negative/receipt-untagged.cose": "malformed",
                "negative/receipt-truncated.cose": "truncated", "negative/receipt-wrong-alg.cose": "alg",
                "negative/receipt-unknown-critical.cose": "unknown-critical",
                "negative/receipt-non-shortest-int.cose": "cbor-non-shortest",
                "negative/receipt-indefinite-length.cose": "cbor-indefinite",
                "negative/receipt-unsorted-keys.cose": "cbor-unsorted-keys",
                "negative/receipt-duplicate-key.cose": "duplicate-key"}
    for path, code in receipts.items():
        try:
            raw = open(os.path.join(pack, path), "rb").read()
        except FileNotFoundError:
            continue
        got = open_receipt_envelope(raw)
        if got != code:
            fail("%s: %s, want %s" % (path, got, code))
    return n


def open_receipt_envelope(raw):
    """receipt.md steps 1-9, 11-14 with jcp.py's pieces (the payload decoded
    only as deterministic CBOR, its `signer` the key): the outcome code."""
    try:
        env = cbor_decode(raw, "receipt")
        if raw[:2] != b"\xd2\x84":
            return "malformed"
        prot_raw, unprot, payload, sig = env.value
        prot = cbor_decode(prot_raw, "protected")
        if 2 in prot:
            return "unknown-critical"
        if prot.get(1) not in (-8, -19):
            return "alg"
        p = cbor_decode(payload, "payload")
        if prot[4] != blake3(p["signer"]):
            return "header"
        jcp.check_signature(p["signer"], cbor_encode(["Signature1", prot_raw, b"", payload]), sig, "receipt")
        return "ok"
    except Reject as e:
        return e.code


# =============================================================================
# Running it
# =============================================================================
def main(argv):
    keep = argv[2] if argv[1:2] == ["--keep"] else None
    d = keep or tempfile.mkdtemp(prefix="jcp-selftest-")
    os.makedirs(d, exist_ok=True)
    bad = []

    def fail(msg):
        bad.append(msg)
        print("FAIL " + msg)

    jcp.self_check()
    n_dcbor = check_foreign(fail)
    print("foreign bytes: COSE WG eddsa-sig-01, RFC 8949 key order and floats, %d dCBOR invalid cases, "
          "conformance/v1 receipts" % n_dcbor)

    files = {
        "jcp.json": chain_cases() + decision_cases() + amendment_cases() + ledger_cases(),
        "standing.json": mint_cases() + standing_ledger_cases(),
    }
    jcp_py = os.path.join(HERE, "jcp.py")
    for fname, cases in files.items():
        names = [c["name"] for c in cases]
        assert len(names) == len(set(names)), "duplicate case names"
        doc = {"type": "sandbox.jcp-vectors/1", "roots": [ROOT.text()], "now": NOW, "cases": cases}
        path = os.path.join(d, fname)
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        r = subprocess.run([sys.executable, jcp_py, "--vectors", path, BLAKE3_VECTORS], capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            fail("%s: jcp.py --vectors exited %d" % (fname, r.returncode))
        # a spoilt expectation must make it exit 1
        spoilt = dict(doc, cases=[dict(cases[0], expect="signature")])
        with open(path + ".spoilt", "w") as f:
            json.dump(spoilt, f)
        r = subprocess.run([sys.executable, jcp_py, "--vectors", path + ".spoilt", BLAKE3_VECTORS],
                           capture_output=True, text=True)
        if r.returncode != 1:
            fail("%s: a case that disagrees did not make jcp.py exit 1" % fname)

    # --chain
    chain_file = os.path.join(d, "chain.json")
    with open(chain_file, "w") as f:
        json.dump([b64(e) for e in (G0, G1, G2)], f)
    for now, want_rc, want in ((NOW, 0, "ok"), (NOW + DAY, 1, "refused: expired")):
        r = subprocess.run([sys.executable, jcp_py, "--chain", chain_file, "--root", ROOT.text(), "--now", str(now)],
                           capture_output=True, text=True)
        print("$ jcp.py --chain chain.json --now %d\n%s" % (now, r.stdout.rstrip()))
        if r.returncode != want_rc or not r.stdout.startswith(want):
            fail("--chain at %d: exit %d, %r" % (now, r.returncode, r.stdout + r.stderr))
    r = subprocess.run([sys.executable, jcp_py, "--chain", chain_file, "--root", OTHER.text(), "--now", str(NOW)],
                       capture_output=True, text=True)
    if r.returncode != 1 or "untrusted-root" not in r.stdout:
        fail("--chain under another root: %r" % r.stdout)

    # --ledger
    log = [admit(G0), admit(G1), admit(G2), reserve(1, [G2, G1, G0], {"Cpu": 10 ** 6}, 1),
           post(1, {"Cpu": 7 * 10 ** 5}), reserve(2, [G2, G1, G0], {"Cpu": 3 * 10 ** 6}, 2),
           reserve(3, [G1, G0], {"Gpu": 10 ** 7}, 3), release(3, "expired")]
    ledger_file = os.path.join(d, "ledger.log")
    with open(ledger_file, "w") as f:
        f.write("".join(x + "\n" for x in log))
    r = subprocess.run([sys.executable, jcp_py, "--ledger", ledger_file, "--root", ROOT.text()],
                       capture_output=True, text=True)
    print("$ jcp.py --ledger ledger.log\n" + r.stdout.rstrip())
    want_lines = ["Cpu      ceiling 100000000 reserved 3000000 spent 700000 remaining 96300000",
                  "Cpu      ceiling 1000000000 reserved 3000000 spent 700000 remaining 996300000",
                  "Gpu      ceiling 100000000 reserved 0 spent 0 remaining 100000000"]
    if r.returncode != 0 or not all(w in r.stdout for w in want_lines):
        fail("--ledger budgets: %r" % (r.stdout + r.stderr))
    head = blake3(b"sandbox.jcp-ledger/1")
    for x in log:
        head = blake3(head + x.encode())
    if "head b3:" + head.hex() not in r.stdout:
        fail("--ledger head")
    with open(ledger_file, "a") as f:
        f.write(post(1, {"Cpu": 1}) + "\n")
    r = subprocess.run([sys.executable, jcp_py, "--ledger", ledger_file, "--root", ROOT.text()],
                       capture_output=True, text=True)
    print("$ jcp.py --ledger ledger.log  (a second post of 1 appended)\n" + r.stdout.rstrip())
    if r.returncode != 1 or "double-spend at line[9]" not in r.stdout:
        fail("--ledger double-spend: %r" % r.stdout)

    total = sum(len(c) for c in files.values())
    if keep is None:
        shutil.rmtree(d)
    print("selftest: %d generated cases%s; %s" % (total, " in " + d if keep else "",
                                                  "all agree" if not bad else "%d failures" % len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
