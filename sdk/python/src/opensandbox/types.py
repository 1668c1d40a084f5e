"""The API's objects as Python values (docs/openapi.json, ``components``).

Each is a dataclass read with ``from_dict``, which takes the members this
SDK knows and keeps the whole object as ``raw`` (the service only ever adds
fields: a newer one's are in ``raw``). Times are the service's RFC 3339
strings, unchanged (nanoseconds included); :func:`parse_time` turns one
into a ``datetime``.
"""

import base64
import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "parse_time", "Health", "Outcome", "Energy", "Result", "SandboxInfo", "Continued",
    "FileInfo", "Snapshot", "Record", "Pool", "FleetProgress", "FleetResult", "Claim",
    "Seeded", "PreservationReceipt", "RunReport", "JCPInfo", "Output", "Limits", "WatchEvent",
    "Preview",
]


def parse_time(s):
    """A ``datetime`` (UTC, microseconds) for an RFC 3339 time as the service
    writes it (``2026-12-05T07:10:44.535566059Z``); None for None or ""."""
    if not s:
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % (s,))
    base, frac, tz = m.groups()
    frac = (frac or "0")[:6].ljust(6, "0")
    tz = "+00:00" if tz == "Z" else tz
    return datetime.datetime.fromisoformat("%s.%s%s" % (base, frac, tz))


def _get(d, k, default=None):
    v = d.get(k, default) if isinstance(d, dict) else default
    return default if v is None else v


@dataclass
class Health:
    """``GET /v1/health``: whether the service is alive and how many live
    sandboxes it holds."""
    ok: bool
    sandboxes: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(bool(_get(d, "ok", False)), int(_get(d, "sandboxes", 0)), d)


@dataclass
class Outcome:
    """How a run ended: ``status`` (exited, deadline, out-of-fuel,
    budget-exhausted, out-of-memory, trapped, killed, failed), ``exit_code``
    (only when exited), ``signal`` (S1: the signal that ended the guest),
    ``detail`` (for people)."""
    status: str
    exit_code: Optional[int] = None
    signal: int = 0
    detail: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object (None for None)."""
        if not isinstance(d, dict):
            return None
        return cls(_get(d, "status", ""), d.get("exit_code"), _get(d, "signal", 0), _get(d, "detail", ""))


@dataclass
class Energy:
    """One device class's energy in a run's receipt, in µJ, with the
    provenance of each reading (``"Estimator tdp"``, ...)."""
    cls: str
    measured_uj: int
    estimated_uj: int
    provenance: List[str]

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "class", ""), _get(d, "measured_uj", 0), _get(d, "estimated_uj", 0),
                   list(_get(d, "provenance", [])))


@dataclass
class Result:
    """A sealed run (an exec, or a one-shot run) as ``sandbox run --json``
    describes it (docs/cli.md, schema 1).

    ``run`` is the attestation's address (``b3:…``), ``sealed`` whether its
    records are stored and signed, ``exit_status`` what ``sandbox run``
    exits with and ``exit_status_from`` whose it is (``guest``: its own
    status or 128+signal; ``sandbox``: a limit, a refusal, an interrupt),
    ``records`` the run directory on the service's host. ``stdout`` and
    ``stderr`` are the output the SDK received and captured (empty when
    not captured)."""
    schema: int = 1
    run: str = ""
    sealed: bool = False
    error: str = ""
    tier: str = ""
    tier_required: str = ""
    tier_reason: str = ""
    outcome: Optional[Outcome] = None
    exit_status: int = 0
    exit_status_from: str = ""
    duration_ms: int = 0
    fuel: Optional[int] = None
    energy: List[Energy] = field(default_factory=list)
    records: str = ""
    notes: List[str] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    #: whether ``stdout`` and ``stderr`` hold all the output (capture was on)
    captured: bool = field(default=False, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(
            schema=_get(d, "schema", 1), run=_get(d, "run", ""), sealed=bool(_get(d, "sealed", False)),
            error=_get(d, "error", ""), tier=_get(d, "tier", ""), tier_required=_get(d, "tier_required", ""),
            tier_reason=_get(d, "tier_reason", ""), outcome=Outcome.from_dict(d.get("outcome")),
            exit_status=_get(d, "exit_status", 0), exit_status_from=_get(d, "exit_status_from", ""),
            duration_ms=_get(d, "duration_ms", 0), fuel=d.get("fuel"),
            energy=[Energy.from_dict(e) for e in _get(d, "energy", [])], records=_get(d, "records", ""),
            notes=list(_get(d, "notes", [])), raw=d)

    @property
    def exit_code(self):
        """The guest's exit code when it exited, else None (see
        ``exit_status`` for a code in every case)."""
        return self.outcome.exit_code if self.outcome else None

    @property
    def ok(self):
        """True when the program exited 0."""
        return bool(self.outcome and self.outcome.status == "exited" and self.outcome.exit_code == 0)

    @property
    def text(self):
        """The captured stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def energy_uj(self):
        """The run's energy, every class, measured plus estimated, in µJ."""
        return sum(e.measured_uj + e.estimated_uj for e in self.energy)


@dataclass
class Continued:
    """An S2 exec a resumption continued: its ``n``, its ``result`` and what it
    wrote after its park point."""
    n: int
    result: Optional[Result]
    stdout: bytes
    stderr: bytes
    error: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        r = d.get("result")
        return cls(_get(d, "n", 0), Result.from_dict(r) if isinstance(r, dict) else None,
                   base64.b64decode(_get(d, "stdout", "")), base64.b64decode(_get(d, "stderr", "")),
                   _get(d, "error", ""))


@dataclass
class SandboxInfo:
    """A sandbox as the service describes it. ``state`` is ``live`` or
    ``suspended`` (in a cluster's list also ``lost``); ``workspace`` is its
    read-write directory (a new path at each resumption); ``grants`` in the
    command line's syntax; ``incarnation`` names this life of its
    processes; ``host``, in a cluster's list, the host that holds it where
    that is not the host asked."""
    id: str
    tier: str = ""
    state: str = ""
    workspace: str = ""
    created: str = ""
    execs: int = 0
    running: int = 0
    grants: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    listen: List[int] = field(default_factory=list)
    root: str = ""
    manifest: str = ""
    incarnation: str = ""
    continued: List[Continued] = field(default_factory=list)
    host: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(
            id=_get(d, "id", ""), tier=_get(d, "tier", ""), state=_get(d, "state", ""), host=_get(d, "host", ""),
            workspace=_get(d, "workspace", ""), created=_get(d, "created", ""), execs=_get(d, "execs", 0),
            running=_get(d, "running", 0), grants=list(_get(d, "grants", [])), env=dict(_get(d, "env", {})),
            listen=list(_get(d, "listen", [])), root=_get(d, "root", ""), manifest=_get(d, "manifest", ""),
            incarnation=_get(d, "incarnation", ""),
            continued=[Continued.from_dict(c) for c in _get(d, "continued", [])], raw=d)


@dataclass
class FileInfo:
    """One entry of a directory listing: ``mode`` as ``ls -l`` writes it,
    ``dir`` and ``link`` flags, ``mod_time`` RFC 3339."""
    name: str
    size: int
    mode: str
    dir: bool = False
    link: bool = False
    mod_time: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "name", ""), _get(d, "size", 0), _get(d, "mode", ""), bool(_get(d, "dir", False)),
                   bool(_get(d, "link", False)), _get(d, "mod_time", ""))


@dataclass
class Snapshot:
    """What a suspension kept, by content address: the workspace's tree
    (``root``), the environment manifest, and a memory image (S5, parked
    S2 execs) where one is kept."""
    root: str
    manifest: str
    memory: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "root", ""), _get(d, "manifest", ""), _get(d, "memory", ""))


@dataclass
class ForkChild:
    """One child of a fork: its ``id`` always; ``sandbox`` (a
    :class:`SandboxInfo`) where it was made, else ``error``, the typed
    :class:`~opensandbox.errors.APIError` that stopped it (its record, if
    begun, closed saying why)."""
    id: str
    sandbox: Optional[SandboxInfo] = None
    error: Optional[Exception] = None

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        from .errors import CATEGORY_STATUS, error_from_body
        sb, err = d.get("sandbox"), d.get("error")
        return cls(_get(d, "id", ""), SandboxInfo.from_dict(sb) if isinstance(sb, dict) else None,
                   error_from_body(CATEGORY_STATUS.get(err.get("category"), 500), err) if isinstance(err, dict) else None)


@dataclass
class Forked:
    """What a fork made: the ``parent`` sandbox, its record's ``genesis``
    (head0) and the ``head`` its state was taken at (as each child's record
    cites them), the :class:`Snapshot` every child began from, and every
    child in order (:class:`ForkChild`: made, or why not)."""
    parent: str
    genesis: str
    head: str
    snapshot: Snapshot
    children: List[ForkChild] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "parent", ""), _get(d, "genesis", ""), _get(d, "head", ""),
                   Snapshot.from_dict(_get(d, "snapshot", {})),
                   [ForkChild.from_dict(c) for c in _get(d, "children", [])])

    @property
    def made(self):
        """The children that were made, as :class:`SandboxInfo`."""
        return [c.sandbox for c in self.children if c.sandbox is not None]

    @property
    def failed(self):
        """The children that were not, as :class:`ForkChild`."""
        return [c for c in self.children if c.error is not None]


@dataclass
class Preview:
    """An open preview of a sandbox's port (``POST /v1/sandboxes/{id}/ports``):
    the ``sandbox``, the ``port``, ``preview`` (its token's content address,
    ``b3:…``, as the sandbox's record keeps it) and when it ``expires``
    (RFC 3339, whole seconds; :attr:`expires_at` as a ``datetime``). ``url``
    (``https://HOST:PORT/preview/TOKEN/``) and ``token`` are said only when
    it is made; a listing leaves them empty."""
    sandbox: str
    port: int
    preview: str
    expires: str
    token: str = ""
    url: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "sandbox", ""), _get(d, "port", 0), _get(d, "preview", ""), _get(d, "expires", ""),
                   _get(d, "token", ""), _get(d, "url", ""), d if isinstance(d, dict) else {})

    @property
    def expires_at(self):
        """``expires`` as a ``datetime`` (UTC)."""
        return parse_time(self.expires)


@dataclass
class Record:
    """A sandbox's run record (its durable run), verified by the service:
    ``phase`` active, parked or closed; its ``head``; how many segments and
    executions; the idle, active and total energy in µJ; ``error`` when it
    does not verify."""
    id: str
    phase: str
    head: str
    segments: int
    executed: int
    idle_uj: int
    active_uj: int = 0
    total_uj: int = 0
    runs_missing: int = 0
    error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "id", ""), _get(d, "phase", ""), _get(d, "head", ""), _get(d, "segments", 0),
                   _get(d, "executed", 0), _get(d, "idle_uj", 0), _get(d, "active_uj", 0),
                   _get(d, "total_uj", 0), _get(d, "runs_missing", 0), _get(d, "error", ""), d)


@dataclass
class Pool:
    """A warm pool (``sandbox serve --pool``) and what it did."""
    name: str
    size: int = 0
    ready: int = 0
    draining: bool = False
    made: int = 0
    claims: int = 0
    misses: int = 0
    evictions: int = 0
    failures: int = 0
    claimed_uj: int = 0
    evicted_uj: int = 0

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(**{k: _get(d, k, getattr(cls, k, 0) if k != "name" else "")
                      for k in ("name", "size", "ready", "draining", "made", "claims", "misses",
                                "evictions", "failures", "claimed_uj", "evicted_uj")})


@dataclass
class WatchEvent:
    """One event of a watch (:meth:`opensandbox.Client.watch`): ``op`` is
    ``watching``, ``create``, ``modify``, ``delete``, ``rename`` (the old
    path in ``from_path``), ``overflow`` or ``ended`` (``why`` says what
    happened); ``path`` as the sandbox names it; ``dir`` for a directory."""
    op: str
    path: str = ""
    from_path: str = ""
    dir: bool = False
    why: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        if not isinstance(d, dict) or not isinstance(d.get("op"), str):
            raise ValueError("a watch event is an object with an op")
        return cls(op=d["op"], path=_get(d, "path", ""), from_path=_get(d, "from", ""), dir=bool(_get(d, "dir", False)),
                   why=_get(d, "why", ""))


@dataclass
class FleetProgress:
    """How many items of a fleet have ended, of how many."""
    done: int
    total: int


@dataclass
class FleetResult:
    """A fleet that ran: its id and directory in the service's state, its
    item count, the items whose guest did not exit 0 (still sealed) and its
    signed checkpoint (a signed note)."""
    id: str
    dir: str
    items: int
    failed: int
    checkpoint: str

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "id", ""), _get(d, "dir", ""), _get(d, "items", 0), _get(d, "failed", 0),
                   _get(d, "checkpoint", ""))


@dataclass
class Claim:
    """A seed's owner claim, from the caller's trusted context."""
    run: str
    requester: str
    thread: str
    repository: str
    ref: str
    head: str

    def to_dict(self):
        """The API's object."""
        return {"run": self.run, "requester": self.requester, "thread": self.thread,
                "repository": self.repository, "ref": self.ref, "head": self.head}


@dataclass
class Seeded:
    """What a seed bound: ``state`` ``bound`` (or ``pending`` unclaimed), the
    checkout's ``head``, whether it came from the cache, and its runs."""
    sandbox: str
    incarnation: str
    state: str
    head: str
    cached: bool = False
    runs: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "sandbox", ""), _get(d, "incarnation", ""), _get(d, "state", ""),
                   _get(d, "head", ""), bool(_get(d, "cached", False)), list(_get(d, "runs", [])))


@dataclass
class PreservationReceipt:
    """A passive preservation receipt: ``state`` present, lost or unknown,
    and why; read from durable metadata only, never a permit to retire."""
    sandbox: str
    state: str
    reason: str
    incarnation: str = ""
    checkpoint: str = ""
    taken: str = ""
    retain_until: str = ""

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "sandbox", ""), _get(d, "state", ""), _get(d, "reason", ""),
                   _get(d, "incarnation", ""), _get(d, "checkpoint", ""), _get(d, "taken", ""),
                   _get(d, "retain_until", ""))


@dataclass
class RunReport:
    """A sealed run as the service verified it against its own key
    (``GET /v1/runs/{id}``): ``verified`` and its ``problems``, the signer,
    unit, outcome, times, energy and notes. This is the service's word;
    :meth:`opensandbox.Client.verify_run` checks the run offline."""
    run: str
    verified: bool
    problems: List[str] = field(default_factory=list)
    signer: str = ""
    unit: str = ""
    outcome: Optional[Outcome] = None
    started: str = ""
    ended: str = ""
    energy: List[Energy] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "run", ""), bool(_get(d, "verified", False)), list(_get(d, "problems", [])),
                   _get(d, "signer", ""), _get(d, "unit", ""), Outcome.from_dict(d.get("outcome")),
                   _get(d, "started", ""), _get(d, "ended", ""),
                   [Energy.from_dict(e) for e in _get(d, "energy", [])], list(_get(d, "notes", [])), d)


@dataclass
class JCPInfo:
    """``GET /v1/jcp``: the service's host key (``ed25519:…``; it signs runs,
    decisions and the ledger's heads) and the JCP root keys it trusts."""
    key: str
    roots: List[str]

    @classmethod
    def from_dict(cls, d):
        """Read the API's object."""
        return cls(_get(d, "key", ""), list(_get(d, "roots", [])))


@dataclass
class Output:
    """A piece of a call's output as it streamed: ``stream`` is ``"stdout"``
    or ``"stderr"``, ``data`` the bytes."""
    stream: str
    data: bytes


@dataclass
class Limits:
    """A one-shot run's own limits (0 or None: the service's):
    ``memory_bytes`` (S1, at least 16 MiB), ``pids`` (S1, at least 2),
    ``cpu_millis`` (S1), ``memory_pages`` (S2, 64 KiB pages, 1-65536)."""
    memory_bytes: int = 0
    pids: int = 0
    cpu_millis: int = 0
    memory_pages: int = 0

    def to_dict(self):
        """The API's object, zero members left out."""
        return {k: v for k, v in (("memory_bytes", self.memory_bytes), ("pids", self.pids),
                                  ("cpu_millis", self.cpu_millis), ("memory_pages", self.memory_pages)) if v}
