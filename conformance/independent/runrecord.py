#!/usr/bin/env python3
"""An independent verifier of run records, written from docs/spec/run-record.md
alone: Python's standard library and a BLAKE3 written here from the BLAKE3
paper (checked against the official test vectors before anything else), none
of this project's code.

usage: runrecord.py DURABLE_JSON BLAKE3_TEST_VECTORS_JSON
       runrecord.py --record FILE [--cited b3:HEX]
       runrecord.py --pack DIR BLAKE3_TEST_VECTORS_JSON

The first form checks every case of conformance/v1/positive/durable.json and
exits 0 only if each ends as the case states. The second verifies one record
file and prints its head. The third checks that every file of the pack in DIR
is the one its manifest.json pins by BLAKE3 address, and that the pack holds
no other (docs/spec/conformance.md), then the pack's durable.json as the
first form does. Limit: canonical form is checked by re-serialising
with sorted keys, which equals RFC 8785 for the ASCII member names records
use (JCS sorts by UTF-16 code units, Python by code points).
"""
import json
import os
import sys

# ---- BLAKE3 (hash mode, 32-byte output) --------------------------------------
IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
CHUNK_START, CHUNK_END, PARENT, ROOT = 1, 2, 4, 8
M32 = 0xFFFFFFFF


def rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & M32


def g(s, a, b, c, d, x, y):
    s[a] = (s[a] + s[b] + x) & M32
    s[d] = rotr(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & M32
    s[b] = rotr(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b] + y) & M32
    s[d] = rotr(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & M32
    s[b] = rotr(s[b] ^ s[c], 7)


def compress(cv, m, counter, blen, flags):
    s = cv[:] + IV[:4] + [counter & M32, (counter >> 32) & M32, blen, flags]
    m = m[:]
    for r in range(7):
        g(s, 0, 4, 8, 12, m[0], m[1]); g(s, 1, 5, 9, 13, m[2], m[3])
        g(s, 2, 6, 10, 14, m[4], m[5]); g(s, 3, 7, 11, 15, m[6], m[7])
        g(s, 0, 5, 10, 15, m[8], m[9]); g(s, 1, 6, 11, 12, m[10], m[11])
        g(s, 2, 7, 8, 13, m[12], m[13]); g(s, 3, 4, 9, 14, m[14], m[15])
        if r < 6:
            m = [m[i] for i in PERM]
    return [s[i] ^ s[i + 8] for i in range(8)]


def words(block):
    block = block + bytes(64 - len(block))
    return [int.from_bytes(block[i:i + 4], "little") for i in range(0, 64, 4)]


def chunk_cv(chunk, index, root):
    cv = IV[:]
    blocks = [chunk[i:i + 64] for i in range(0, len(chunk), 64)] or [b""]
    for i, b in enumerate(blocks):
        flags = (CHUNK_START if i == 0 else 0) | (CHUNK_END if i == len(blocks) - 1 else 0)
        if root and i == len(blocks) - 1:
            flags |= ROOT
        cv = compress(cv, words(b), index, len(b), flags)
    return cv


def parent_cv(left, right, root):
    return compress(IV[:], left + right, 0, 64, PARENT | (ROOT if root else 0))


def blake3(data):
    chunks = [data[i:i + 1024] for i in range(0, len(data), 1024)] or [b""]
    if len(chunks) == 1:
        out = chunk_cv(chunks[0], 0, True)
    else:
        # The tree: left subtrees hold the largest power of two of chunks.
        def tree(lo, hi, root):
            if hi - lo == 1:
                return chunk_cv(chunks[lo], lo, False)
            n = hi - lo
            left = 1 << ((n - 1).bit_length() - 1)
            return parent_cv(tree(lo, lo + left, False), tree(lo + left, hi, False), root)
        out = tree(0, len(chunks), True)
    return b"".join(w.to_bytes(4, "little") for w in out)


def check_blake3(path):
    with open(path) as f:
        tv = json.load(f)
    for case in tv["cases"]:
        n = case["input_len"]
        data = bytes(i % 251 for i in range(n))
        if blake3(data).hex() != case["hash"][:64]:
            sys.exit("this BLAKE3 disagrees with the official vector of length %d" % n)


# ---- canonical JSON, as docs/spec/canonical.md restricts it -------------------
class Reject(Exception):
    def __init__(self, code, line, detail):
        super().__init__("%s at line %d: %s" % (code, line, detail))
        self.code, self.line = code, line


def no_dups(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate-key")
    return dict(pairs)


def parse_canonical(raw, line):
    text = raw.decode("utf-8")
    try:
        v = json.loads(text, object_pairs_hook=no_dups, parse_float=lambda s: ("FLOAT", s))
    except ValueError as e:
        if "duplicate-key" in str(e):
            raise Reject("duplicate-key", line, "a member twice")
        code = "truncated" if "Expecting" in str(e) and e.pos >= len(text) - 1 else "malformed"
        raise Reject(code, line, str(e))

    def walk(x):
        if isinstance(x, tuple):
            raise Reject("float", line, x[1])
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, int) and abs(x) >= 2 ** 53:
            raise Reject("int-range", line, str(x))
        if isinstance(x, dict):
            for y in x.values():
                walk(y)
        if isinstance(x, list):
            for y in x:
                walk(y)
    walk(v)
    if json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False) != text:
        raise Reject("non-canonical", line, "not its JCS form")
    if not isinstance(v, dict):
        raise Reject("invalid", line, "not an object")
    return v


def digest(v, field, line):
    if not isinstance(v, str) or not v.startswith("b3:") or len(v) != 67:
        raise Reject("invalid", line, "%s: not an address" % field)
    b = bytes.fromhex(v[3:])
    if b == bytes(32):
        raise Reject("missing-field", line, "%s: the all-zero address" % field)
    return b


def members(obj, required, optional, line):
    for k in obj:
        if k not in required and k not in optional:
            raise Reject("unknown-field", line, k)
    for k in required:
        if k not in obj:
            raise Reject("missing-field", line, k)


def snapshot(s, line):
    if not isinstance(s, dict):
        raise Reject("invalid", line, "snapshot")
    members(s, ["root", "manifest"], ["memory"], line)
    return tuple(digest(s.get(k), k, line) if k in s else None for k in ("root", "manifest", "memory"))


# ---- the record --------------------------------------------------------------
def idle_figure(seg, line):
    uj, prov = seg["idle_uj"], seg["idle_provenance"]
    if not isinstance(uj, int) or isinstance(uj, bool) or uj < 0:
        raise Reject("invalid", line, "idle_uj")
    if not isinstance(prov, str) or not any(prov.startswith(p) and len(prov) > len(p) for p in ("Measured ", "Estimator ")):
        raise Reject("invalid", line, "idle_provenance")
    return uj


def host_key(v, field, line):
    if not isinstance(v, str) or not v.startswith("ed25519:") or len(v) != 72:
        raise Reject("invalid", line, "%s: not an ed25519 key" % field)
    try:
        return bytes.fromhex(v[8:])
    except ValueError:
        raise Reject("invalid", line, "%s: not hex" % field)


def placement(p, line):
    """A placed segment's placement (run-record.md): whole, its host among
    its candidates, signed by its `by` over "sandbox.placement/1", a
    newline and its canonical JSON without `sig`."""
    if not isinstance(p, dict):
        raise Reject("invalid", line, "placement")
    members(p, ["host", "by", "tier", "candidates", "why", "sig"], [], line)
    chosen, by = host_key(p["host"], "placement.host", line), host_key(p["by"], "placement.by", line)
    for k in ("tier", "why", "sig"):
        if not isinstance(p[k], str) or p[k] == "":
            raise Reject("missing-field", line, "placement." + k)
    cands = p["candidates"]
    if not isinstance(cands, list) or not 1 <= len(cands) <= 64:
        raise Reject("invalid", line, "placement.candidates: 1 to 64")
    hosts = set()
    for i, c in enumerate(cands):
        if not isinstance(c, dict):
            raise Reject("invalid", line, "placement.candidates[%d]" % i)
        members(c, ["host", "capacity", "live", "idle_mw", "cost_mw"], [], line)
        h = host_key(c["host"], "placement.candidates[%d].host" % i, line)
        if h in hosts:
            raise Reject("invalid", line, "placement.candidates[%d]: a host twice" % i)
        hosts.add(h)
        for k in ("capacity", "live", "idle_mw", "cost_mw"):
            if not isinstance(c[k], int) or isinstance(c[k], bool) or c[k] < 0:
                raise Reject("invalid", line, "placement.candidates[%d].%s" % (i, k))
    if chosen not in hosts:
        raise Reject("invalid", line, "placement.host: none of the candidates")
    import jcp  # its Ed25519 (RFC 8032) and JCS; it imports this file's BLAKE3
    unsigned = {k: v for k, v in p.items() if k != "sig"}
    msg = b"sandbox.placement/1\n" + jcp.jcs(unsigned).encode("utf-8")
    try:
        jcp.check_signature(by, msg, jcp.b64url(p["sig"], line), line)
    except jcp.Reject as e:
        raise Reject("signature", line, "placement.sig: " + str(e))


def parent(p, line):
    """A forked segment's parent (run-record.md): the record the fork was
    made from, by its sandbox's id ("sb-" and 12 lowercase hex digits),
    its head0 and the head it had when the state was taken."""
    if not isinstance(p, dict):
        raise Reject("invalid", line, "parent")
    members(p, ["record", "genesis", "head"], [], line)
    rec = p["record"]
    if not isinstance(rec, str):
        raise Reject("invalid", line, "parent.record")
    if rec == "":
        raise Reject("missing-field", line, "parent.record")
    if len(rec) != 15 or not rec.startswith("sb-") or any(c not in "0123456789abcdef" for c in rec[3:]):
        raise Reject("invalid", line, "parent.record: not a sandbox id")
    digest(p["genesis"], "parent.genesis", line)
    digest(p["head"], "parent.head", line)


def preview(seg, line):
    """An exposed or unexposed segment's port (a TCP port, 1 to 65535) and
    preview (the address of the preview's token); returns the two."""
    port = seg["port"]
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise Reject("invalid", line, "port: not a TCP port")
    return port, digest(seg["preview"], "preview", line)


def verify(data, cited=None):
    if data and not data.endswith(b"\n"):
        raise Reject("truncated", data.count(b"\n") + 1, "the last line has no newline")
    lines = data.split(b"\n")[:-1]
    if not lines:
        raise Reject("missing", 1, "no genesis entry")
    for i, l in enumerate(lines):
        if not l:
            raise Reject("malformed", i + 1, "an empty line")
    hdr = parse_canonical(lines[0], 1)
    if "kind" in hdr:
        raise Reject("missing", 1, "a segment where the genesis entry belongs")
    members(hdr, ["record", "unit", "grants"], [], 1)
    if hdr["record"] != "sandbox.runrecord/1":
        raise Reject("unrecognised", 1, hdr["record"])
    head = blake3(b"sandbox.runrecord/1" + digest(hdr["unit"], "unit", 1) + digest(hdr["grants"], "grants", 1))
    heads = [head]
    phase, last, segs, executed, idle = "active", None, 0, 0, 0
    runs = {}  # attestation -> the line that executed it
    exposed = {}  # preview -> the line that exposed it
    open_ = {}  # preview -> its port, for the previews open now
    for n, raw in enumerate(lines[1:], start=2):
        seg = parse_canonical(raw, n)
        kind = seg.get("kind")
        uj = 0
        if kind == "executed":
            members(seg, ["kind", "attestation"], [], n)
            digest(seg["attestation"], "attestation", n)
        elif kind == "suspended":
            members(seg, ["kind", "snapshot"], [], n)
            snap = snapshot(seg["snapshot"], n)
        elif kind == "resumed":
            members(seg, ["kind", "snapshot", "idle_uj", "idle_provenance"], [], n)
            snap = snapshot(seg["snapshot"], n)
            uj = idle_figure(seg, n)
        elif kind == "closed":
            members(seg, ["kind"], ["reason", "idle_uj", "idle_provenance"], n)
            uj = seg.get("idle_uj", 0)
            if "idle_uj" in seg or "idle_provenance" in seg:
                if "idle_provenance" not in seg:
                    raise Reject("missing-field", n, "idle_provenance")
                if "idle_uj" not in seg:
                    raise Reject("missing-field", n, "idle_uj")
                idle_figure(seg, n)
        elif kind == "claimed":
            members(seg, ["kind", "pool", "idle_uj", "idle_provenance"], [], n)
            if not isinstance(seg["pool"], str):
                raise Reject("invalid", n, "pool")
            if seg["pool"] == "":
                raise Reject("missing-field", n, "pool")
            uj = idle_figure(seg, n)
        elif kind == "placed":
            members(seg, ["kind", "placement"], [], n)
            placement(seg["placement"], n)
        elif kind == "forked":
            members(seg, ["kind", "parent", "snapshot"], [], n)
            parent(seg["parent"], n)
            snap = snapshot(seg["snapshot"], n)
        elif kind == "exposed":
            members(seg, ["kind", "port", "preview", "until"], [], n)
            port, pv = preview(seg, n)
            until = seg["until"]
            if not isinstance(until, int) or isinstance(until, bool):
                raise Reject("invalid", n, "until")
            if not 1 <= until <= 2 ** 53 - 1:
                raise Reject("int-range", n, "until: 1 to 2^53-1 Unix seconds")
        elif kind == "unexposed":
            members(seg, ["kind", "port", "preview", "reason"], [], n)
            port, pv = preview(seg, n)
            if not isinstance(seg["reason"], str):
                raise Reject("invalid", n, "reason")
            if seg["reason"] == "":
                raise Reject("missing-field", n, "reason")
            if len(seg["reason"].encode("utf-8")) > 200:
                raise Reject("invalid", n, "reason: more than 200 bytes")
        elif kind is None:
            raise Reject("missing-field", n, "kind")
        else:
            raise Reject("invalid", n, "kind %r" % kind)
        if phase == "closed":
            raise Reject("closed", n, "after the close")
        if kind in ("executed", "suspended", "placed", "exposed", "unexposed") and phase == "parked":
            raise Reject("phase", n, kind + " while parked")
        if kind in ("resumed", "claimed", "closed") and idle + uj >= 2 ** 53:
            raise Reject("int-range", n, "idle energy")
        if kind == "executed" and seg["attestation"] in runs:
            raise Reject("invalid", n, "the run of line %d executed again" % runs[seg["attestation"]])
        if kind == "resumed":
            if phase != "parked":
                raise Reject("phase", n, "resumed while active")
            if snap != last:
                raise Reject("snapshot-mismatch", n, "not the suspended snapshot")
        if kind == "claimed" and segs != 0:
            raise Reject("phase", n, "claimed after another segment")
        if kind == "forked" and segs != 0:
            raise Reject("phase", n, "forked after another segment: a fork begins its record")
        if kind == "exposed" and pv in exposed:
            raise Reject("invalid", n, "the preview of line %d exposed again" % exposed[pv])
        if kind == "unexposed" and open_.get(pv) != port:
            raise Reject("invalid", n, "no preview open on this port by that address")
        head = blake3(head + raw)
        heads.append(head)
        segs += 1
        if kind == "executed":
            executed += 1
            runs[seg["attestation"]] = n
        elif kind == "exposed":
            exposed[pv], open_[pv] = n, port
        elif kind == "unexposed":
            del open_[pv]
        elif kind in ("suspended", "forked"):
            # A fork begins parked at the snapshot it was made from. A
            # suspension ends every preview.
            phase, last, open_ = "parked", snap, {}
        elif kind == "resumed":
            phase, idle = "active", idle + uj
        elif kind == "claimed":
            idle += uj
        elif kind == "closed":
            phase, idle = "closed", idle + uj
    if cited is not None and cited not in heads:
        raise Reject("head-mismatch", 0, "the cited head is not among the record's")
    return {"head": "b3:" + head.hex(), "phase": phase, "segments": segs, "executed": executed, "idle_uj": idle}


def check_pack(d):
    """The files of the pack in d against its manifest's pins: the number
    that differ (missing, another address, or not pinned)."""
    with open(os.path.join(d, "manifest.json"), "rb") as f:
        files = json.loads(f.read().decode("utf-8"))["files"]
    bad, pinned = 0, set()
    for f in files:
        p = f["path"]
        pinned.add(p)
        try:
            with open(os.path.join(d, *p.split("/")), "rb") as g:
                data = g.read()
        except FileNotFoundError:
            print("%s: missing" % p)
            bad += 1
            continue
        if "b3:" + blake3(data).hex() != f["address"]:
            print("%s: address: the manifest pins %s" % (p, f["address"]))
            bad += 1
    for root, _, names in os.walk(d):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), d).replace(os.sep, "/")
            if rel != "manifest.json" and rel not in pinned:
                print("%s: unrecognised: not pinned" % rel)
                bad += 1
    print("%d files pinned, %d differ" % (len(files), bad))
    return bad


def main(argv):
    if argv[1:2] == ["--pack"]:
        vectors = argv[3]
        check_blake3(vectors)
        if check_pack(argv[2]):
            sys.exit(1)
        main([argv[0], os.path.join(argv[2], "positive", "durable.json"), vectors])
        return
    if argv[1:2] == ["--record"]:
        cited = bytes.fromhex(argv[4][3:]) if argv[3:4] == ["--cited"] else None
        with open(argv[2], "rb") as f:
            try:
                print(json.dumps(verify(f.read(), cited)))
            except Reject as e:
                sys.exit(str(e))
        return
    check_blake3(argv[2])
    with open(argv[1]) as f:
        pack = json.load(f)
    bad = 0
    for c in pack["cases"]:
        cited = bytes.fromhex(c["cited_head"][3:]) if "cited_head" in c else None
        try:
            got = verify(c["record"].encode("utf-8"), cited)
            want = {k: c.get(k, 0) for k in ("head", "phase", "segments", "executed", "idle_uj")}
            if c["expect"] != "ok" or got != want:
                bad += 1
                print("%s: got ok %s, want %s" % (c["name"], got, c["expect"] if c["expect"] != "ok" else want))
        except Reject as e:
            if e.code != c["expect"] or (c.get("line", 0) and e.line != c["line"]):
                bad += 1
                print("%s: got %s, want %s at line %d" % (c["name"], e, c["expect"], c.get("line", 0)))
    print("%d cases, %d disagree" % (len(pack["cases"]), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv)
