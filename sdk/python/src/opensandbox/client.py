"""The synchronous client of a sandbox service (``sandbox serve``).

It covers what the Go client (package ``client``) covers, over the same
HTTP/JSON API (docs/api.md, docs/openapi.json): live sandboxes, execs with
their output streamed, files, suspension and resumption, seeds and
preservation receipts, one-shot sealed runs, warm pools, fleets, run
records, run reports, a run's sealed files, interrupts by key, JCP's
operations and health; and offline verification of a sealed run
(:meth:`Client.verify_run`), here or against a remote service.

Every request names the API operation it is (``"GET /v1/sandboxes/{id}"``,
as docs/openapi.json writes it) and is built by :func:`_op` from that name;
:data:`OPERATIONS` says which operations each public method of
:class:`Client` sends. tests/test_parity.py checks both against the
OpenAPI document.
"""

import base64
import io
import json
import os
import re
import secrets
import tempfile
import threading
import time
import urllib.parse

from . import verify as _verify
from ._http import Address, Deadline, Transport, default_state_dir, resolve
from .errors import (CommandFailed, ExecTimeout, NoResultError, NotFoundError, OutputError, ProtocolError,
                     RequestTimeout, SandboxError, ServiceUnreachable, error_from_body)
from .types import (FileInfo, FleetProgress, FleetResult, Health, JCPInfo, Limits, Output, Pool,
                    PreservationReceipt, Preview, Record, Result, RunReport, SandboxInfo, Seeded, Snapshot, Forked,
                    WatchEvent)

__all__ = ["Client", "Sandbox", "ExecStream", "DEFAULT_TIMEOUT", "INTERRUPT_WAIT", "STDIN_STREAM_TYPE",
           "POLICY_HEADER", "MAX_STDIN", "MAX_BUNDLE_BYTES", "MAX_PREVIEW_TTL", "OPERATIONS", "LOCAL_METHODS"]

#: client-side timeout of an ordinary call, in seconds
DEFAULT_TIMEOUT = 120.0
#: how long a call that was interrupted (its timeout, an output error, Ctrl-C)
#: waits for its sealed result before the connection is dropped (the Go
#: client's InterruptWait)
INTERRUPT_WAIT = 15.0
#: added to the service-side deadline to make an exec's default client-side timeout
TIMEOUT_MARGIN = 30.0
#: the service's default deadline of an exec or run (deadline_ms 0 or absent)
DEFAULT_DEADLINE_MS = 60000
#: the content type of a call whose stdin streams
STDIN_STREAM_TYPE = "application/x-sandbox-exec-stream"
#: the request header that narrows a caller to a policy document
POLICY_HEADER = "Sandbox-Policy"
#: the most stdin given whole in the JSON body; more is streamed
MAX_STDIN = 16 << 20
#: the most sandboxes one fork makes
MAX_FORK = 64
#: the longest a port preview lasts, in seconds (its default: an hour)
MAX_PREVIEW_TTL = 86400
#: the most bytes of a run's bundle (GET /v1/runs/{id}/bundle) read by default
MAX_BUNDLE_BYTES = 1 << 30

_INTERRUPT = "POST /v1/interrupts/{key}"

#: Each public method of :class:`Client` that talks to the service, and the
#: API operations it may send ("METHOD /path", the path as docs/openapi.json
#: writes it). The same names are :class:`~opensandbox.AsyncClient`'s
#: coroutines. Every operation of the OpenAPI document is here, and nothing
#: else is (tests/test_parity.py).
OPERATIONS = {
    "health": ("GET /v1/health",),
    "openapi": ("GET /v1/openapi.json",),
    "metrics": ("GET /metrics",),
    "host_key": ("GET /v1/key",),
    "create": ("POST /v1/sandboxes",),
    "list_sandboxes": ("GET /v1/sandboxes",),
    "get_sandbox": ("GET /v1/sandboxes/{id}",),
    "sandbox": ("GET /v1/sandboxes/{id}",),
    "remove_sandbox": ("DELETE /v1/sandboxes/{id}",),
    "close_sandbox": ("POST /v1/sandboxes/{id}/close",),
    "suspend": ("POST /v1/sandboxes/{id}/suspend",),
    "fork": ("POST /v1/sandboxes/{id}/fork",),
    "watch": ("GET /v1/sandboxes/{id}/watch",),
    "expose_port": ("POST /v1/sandboxes/{id}/ports",),
    "list_ports": ("GET /v1/sandboxes/{id}/ports",),
    "revoke_port": ("DELETE /v1/sandboxes/{id}/ports/{port}",),
    "resume": ("POST /v1/sandboxes/{id}/resume",),
    "seed": ("POST /v1/sandboxes/{id}/seed",),
    "preservation": ("POST /v1/sandboxes/{id}/preservation",),
    "pools": ("GET /v1/pools",),
    "claim": ("POST /v1/pools/{name}/claim",),
    "exec": ("POST /v1/sandboxes/{id}/exec", _INTERRUPT),
    "exec_stream": ("POST /v1/sandboxes/{id}/exec", _INTERRUPT),
    "run": ("POST /v1/runs", _INTERRUPT),
    "run_stream": ("POST /v1/runs", _INTERRUPT),
    "interrupt": (_INTERRUPT,),
    "upload": ("PUT /v1/sandboxes/{id}/files",),
    "download": ("GET /v1/sandboxes/{id}/files",),
    "list_files": ("GET /v1/sandboxes/{id}/files",),
    "run_report": ("GET /v1/runs/{id}",),
    "run_bundle": ("GET /v1/runs/{id}/bundle",),
    "fetch_run": ("GET /v1/runs/{id}/bundle",),
    "verify_run": ("GET /v1/runs/{id}/bundle", "GET /v1/key"),
    "records": ("GET /v1/records",),
    "fleet": ("POST /v1/fleets",),
    "jcp_info": ("GET /v1/jcp",),
    "jcp_ledger": ("GET /v1/jcp/ledger",),
    "jcp_verify_ledger": ("POST /v1/jcp/ledger/verify",),
    "jcp_verify_chain": ("POST /v1/jcp/chains/verify",),
    "jcp_admit": ("POST /v1/jcp/chains",),
    "jcp_budgets": ("POST /v1/jcp/chains/budget",),
    "jcp_revoke": ("POST /v1/jcp/revocations",),
    "jcp_amend": ("POST /v1/jcp/amendments",),
    "jcp_policy": ("POST /v1/jcp/policies",),
    "jcp_event": ("POST /v1/jcp/events",),
    "jcp_checkpoint": ("POST /v1/jcp/checkpoints",),
}

#: The public methods of :class:`Client` that send nothing.
LOCAL_METHODS = frozenset({"close", "narrowed"})

_KNOWN_OPS = frozenset(op for ops in OPERATIONS.values() for op in ops)
_PARAM = re.compile(r"\{([a-z]+)\}")
_RUN_ID = re.compile(r"^b3:[0-9a-f]{64}$")


class _Req:
    """A request to send: its operation (``op``), ``method`` and ``target``
    (the path, its parameters escaped, and the query)."""
    __slots__ = ("op", "method", "target")

    def __init__(self, op, method, target):
        self.op, self.method, self.target = op, method, target

    @property
    def path(self):
        return self.target.split("?", 1)[0]


def _op(op, query=None, **params):
    """The request for the API operation ``op`` ("METHOD /path/{param}", one
    of :data:`OPERATIONS`'), its path parameters escaped, and ``query`` (a
    dict; None values left out). Every request the client sends is built
    here."""
    if op not in _KNOWN_OPS:
        raise AssertionError("%r is not an operation of OPERATIONS" % (op,))
    method, template = op.split(" ", 1)

    def param(m):
        v = params.pop(m.group(1))
        if not isinstance(v, str) or not v:
            raise ValueError("%s: {%s} wants a non-empty string, not %r" % (op, m.group(1), v))
        return _q(v)
    target = _PARAM.sub(param, template)
    if params:
        raise TypeError("%s has no parameter %s" % (op, ", ".join(sorted(params))))
    q = {k: v for k, v in (query or {}).items() if v is not None}
    if q:
        target += "?" + urllib.parse.urlencode(q)
    return _Req(op, method, target)


def _array(v, what):
    """An answer the schema says is an array."""
    if not isinstance(v, list):
        raise ProtocolError("%s: the service answered %s, not an array" % (what, type(v).__name__))
    return v


def _port(port):
    """A TCP port number given to a port preview's call."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError("a port is an int (1 to 65535), not %r" % (port,))
    return port


def _run_hex(run_id):
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise _verify.VerificationError("invalid", "run", "%r is not a run id (b3: and 64 lowercase hex digits)"
                                        % (run_id,))
    return run_id[3:]


def _q(s):
    return urllib.parse.quote(s, safe="")


def _b64(b):
    if isinstance(b, str):
        return b
    return base64.b64encode(bytes(b)).decode("ascii")


def _chain(chain):
    if isinstance(chain, (bytes, str)):
        raise TypeError("a chain is a list of envelopes (bytes or standard base64), root first")
    return [_b64(e) for e in chain]


def _drop_none(d):
    return {k: v for k, v in d.items() if v is not None and v != [] and v != {}}


def _default_timeout(deadline_ms, timeout):
    if timeout is not None:
        return timeout if timeout > 0 else None
    if deadline_ms is not None and deadline_ms < 0:
        return None
    ms = deadline_ms if deadline_ms else DEFAULT_DEADLINE_MS
    return ms / 1000.0 + TIMEOUT_MARGIN


def _writer(w):
    """A function writing bytes to w: a text file-like object (sys.stdout)
    gets them decoded as UTF-8, a binary one as they are."""
    if w is None:
        return None
    text = isinstance(w, io.TextIOBase) or ("b" not in getattr(w, "mode", "b") and hasattr(w, "encoding"))

    def write(b):
        w.write(b.decode("utf-8", "replace") if text else b)
        if hasattr(w, "flush"):
            w.flush()
    return write


class ExecStream:
    """An exec or a one-shot run in flight, its output read as it comes.

    Iterate it for :class:`~opensandbox.types.Output` pieces (``stream``
    ``"stdout"`` or ``"stderr"``, ``data`` bytes); once the iteration ends,
    ``result`` is the sealed run (:class:`~opensandbox.types.Result`).
    ``key`` is the call's interrupt key: :meth:`interrupt` (from any
    thread) asks the service to interrupt it, and the stream still ends
    with its sealed result (waited for at most the client's
    ``interrupt_wait``). Past its client-side ``timeout`` the stream
    interrupts the call itself and raises
    :class:`~opensandbox.errors.ExecTimeout` (with the result when it came
    within the interrupt wait). Use it as a context manager: leaving it
    before the end interrupts the call and waits for its result likewise.
    One thread reads a stream; :meth:`interrupt` may come from another."""

    def __init__(self, client, req, spec, source, timeout, capture):
        self._client = client
        self.key = spec["interrupt_key"]
        self.timeout = timeout
        self.capture = capture
        self.result = None
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.interrupted = False  # the service was asked to interrupt it
        self._timed_out = False
        self._ended = False
        self._lock = threading.Lock()
        deadline = None if timeout is None else time.monotonic() + timeout
        line = json.dumps(spec, separators=(",", ":")).encode("utf-8")
        if source is None:
            body, ctype = line, "application/json"
        else:
            body, ctype = line + b"\n", STDIN_STREAM_TYPE
        self._request = (req, body, source, client._headers(ctype), deadline)
        self._head = False
        self._open(fresh=False)

    def _open(self, fresh):
        """Open the call and send it now (a streamed stdin: its first line),
        so that it is in flight, and interruptible, before anyone reads."""
        req, body, source, headers, deadline = self._request
        for attempt in (0, 1):
            self._resp = self._client._t.open(req.method, req.target, body=body, source=source, headers=headers,
                                              deadline=deadline, fresh=fresh or attempt == 1, op=req.op)
            try:
                self._resp.send()
                return
            except Deadline:
                self._end()
                raise ExecTimeout("the call could not be sent within its timeout of %.3gs" % self.timeout,
                                  self.timeout) from None
            except ServiceUnreachable:
                if self._resp.retryable and attempt == 0 and source is None:
                    continue
                raise

    def _ensure_head(self):
        """Read the answer's head once: an error before the program started
        (an HTTP status) is raised here."""
        if self._head:
            return
        try:
            self._read_head()
        except ServiceUnreachable:
            if not (self._resp.retryable and self._request[2] is None):
                raise
            self._open(fresh=True)
            self._read_head()
        self._head = True
        if self._resp.status >= 400:
            self._ended = True
            raise _api_error(self._resp.status, self._resp.read(limit=1 << 20))

    def _read_head(self):
        """Wait for the answer's head: it comes with the first frame, so a
        program that writes nothing may pass its timeout here."""
        while True:
            try:
                self._resp.read_head()
                return
            except Deadline:
                self._passed_deadline()

    def _passed_deadline(self):
        """The deadline passed: the first time (the timeout), interrupt the
        call and wait a while longer for its result; after an interrupt,
        give up (the connection is dropped: the service seals it)."""
        if not self.interrupted:
            self._timed_out = True
            self.interrupt()
            return
        self._ended = True
        self._resp.close()
        what = "ran past its timeout of %.3gs" % self.timeout if self._timed_out else "was interrupted"
        raise ExecTimeout("the call %s, and no sealed result came within %.3gs of interrupting it (the "
                          "connection was dropped; the service seals it)" % (what, self._client.interrupt_wait),
                          self.timeout, stdout=bytes(self.stdout), stderr=bytes(self.stderr)) from None

    # -- reading
    def __iter__(self):
        return self

    def _end(self):
        self._ended = True
        self._resp.close()

    def __next__(self):
        while True:
            if self._ended:
                raise StopIteration
            if not self._head:
                self._ensure_head()
            try:
                line = self._resp.readline()
            except Deadline:
                self._passed_deadline()
                continue
            except BaseException:
                self._end()
                raise
            if line is None:
                self._end()
                if self._resp.upload_error is not None:
                    raise SandboxError("reading the stdin to stream failed: %r" % (self._resp.upload_error,)) \
                        from self._resp.upload_error
                raise NoResultError(stdout=bytes(self.stdout), stderr=bytes(self.stderr))
            if not line.strip():
                continue
            try:
                f = json.loads(line)
            except ValueError as e:
                self._end()
                raise ProtocolError("a malformed frame from the service: %r" % line[:200]) from e
            if not isinstance(f, dict):
                continue
            if f.get("error") is not None:
                self._end()
                e = f["error"]
                raise error_from_body(200, e if isinstance(e, dict) else {"message": str(e)}, in_stream=True)
            if f.get("result") is not None:
                self._end()
                r = Result.from_dict(f["result"])
                r.stdout, r.stderr = bytes(self.stdout), bytes(self.stderr)
                r.captured = self.capture
                self.result = r
                if self._timed_out:
                    raise ExecTimeout("the call ran past its timeout of %.3gs and was interrupted (sealed: %s)"
                                      % (self.timeout, r.outcome.status if r.outcome else "?"), self.timeout,
                                      result=r, stdout=r.stdout, stderr=r.stderr)
                raise StopIteration
            for name, buf in (("stdout", self.stdout), ("stderr", self.stderr)):
                v = f.get(name)
                if v:
                    try:
                        data = base64.b64decode(v, validate=True)
                    except ValueError as e:
                        self._end()
                        raise ProtocolError("a frame's %s is not base64" % name) from e
                    if self.capture:
                        buf += data
                    return Output(name, data)

    def wait(self):
        """Read the stream to its end (discarding what is not captured) and
        return the result."""
        for _ in self:
            pass
        return self.result

    # -- interrupting
    def interrupt(self):
        """Ask the service to interrupt the call (SIGINT to its process group,
        SIGKILL 2 s later); the stream still ends with the sealed result
        (outcome ``killed``), waited for at most the client's
        ``interrupt_wait`` from now. Returns True when the service took it
        (False: not in flight, or already ended). Safe from another thread."""
        with self._lock:
            self.interrupted = True
            now = time.monotonic()
            d, cur = now + self._client.interrupt_wait, self._resp.deadline
            if cur is None or cur > d or cur <= now:
                self._resp.deadline = d
        try:
            return self._client._interrupt_retrying(self.key, self._client.interrupt_wait)
        except SandboxError:
            return False

    def close(self):
        """End the stream: a call still running is interrupted, and its
        result waited for (at most the interrupt wait); then the connection
        is closed."""
        if self._ended:
            return
        try:
            self.interrupt()
            for _ in self:
                pass
        except SandboxError:
            pass
        finally:
            self._end()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _api_error(status, raw):
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return error_from_body(status, body, raw)


class Client:
    """A client of one sandbox service.

    ``address``: a unix socket's path, ``unix:PATH`` or
    ``https://HOST:PORT``; by default ``$SANDBOX_HOST``, else
    ``$SANDBOX_HOME/serve.sock``, else the default state directory's
    socket (``$XDG_STATE_HOME/sandbox`` or ``~/.local/state/sandbox``).
    ``token``: the bearer token of a TCP service (default
    ``$SANDBOX_TOKEN``). ``ca_file``: the CA (or self-signed certificate)
    to trust for https, else the system's; ``ssl_context`` replaces both.
    ``timeout``: the client-side limit of an ordinary call, in seconds.
    ``policy``: a policy document (bytes, str or dict) the service is to
    hold every call to, besides the caller's own authority (the
    ``Sandbox-Policy`` header; see :meth:`narrowed`).

    Nothing is sent until the first call. A client is safe to share
    between threads; :meth:`close` (or ``with``) closes its idle
    connections.
    """

    def __init__(self, address=None, *, token=None, ca_file=None, ssl_context=None, timeout=DEFAULT_TIMEOUT,
                 policy=None, interrupt_wait=INTERRUPT_WAIT, _transport=None):
        if _transport is None:
            addr, tok = resolve(address, token)
            _transport = Transport(addr, tok, ssl_context=ssl_context, ca_file=ca_file)
        self._t = _transport
        self.address = self._t.address
        self.timeout = timeout
        self.interrupt_wait = interrupt_wait
        self._policy = None
        if policy is not None:
            self._policy = self._policy_value(policy)

    # ------------------------------------------------------------------ basics
    @staticmethod
    def _policy_value(doc):
        if isinstance(doc, dict):
            doc = json.dumps(doc).encode("utf-8")
        elif isinstance(doc, str):
            doc = doc.encode("utf-8")
        return base64.urlsafe_b64encode(bytes(doc)).decode("ascii").rstrip("=")

    def narrowed(self, policy):
        """A client sharing this one's connections whose every call asks the
        service to hold it to ``policy`` (a policy document: bytes, str or
        dict) as well as to its own authority: a grant the document does not
        allow is refused (:class:`~opensandbox.errors.DeniedError`)."""
        c = Client(_transport=self._t, timeout=self.timeout, interrupt_wait=self.interrupt_wait)
        c._policy = self._policy_value(policy)
        return c

    def close(self):
        """Close the idle connections."""
        self._t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Client(%s)" % self.address

    def _headers(self, ctype=None):
        h = {}
        if ctype:
            h["Content-Type"] = ctype
        if self._policy:
            h[POLICY_HEADER] = self._policy
        return h

    def _request(self, req, *, body=None, source=None, ctype=None, timeout=None):
        """Send ``req`` (an :func:`_op`) and read its answer's head; an error
        status is raised as its typed error."""
        t = self.timeout if timeout is None else timeout
        deadline = None if t is None or t <= 0 else time.monotonic() + t
        try:
            resp = self._t.request(req.method, req.target, body=body, source=source, headers=self._headers(ctype),
                                   deadline=deadline, op=req.op)
            if resp.status >= 400:
                raise _api_error(resp.status, resp.read(limit=1 << 20))
            return resp
        except Deadline:
            raise RequestTimeout("%s %s: no answer within %.3gs" % (req.method, req.path, t)) from None

    def _call(self, req, payload=None, *, timeout=None, raw=False):
        """Send ``req`` with a JSON ``payload`` and return its decoded answer
        (None for none; its bytes with ``raw``)."""
        body, ctype = None, None
        if payload is not None:
            body, ctype = json.dumps(payload, separators=(",", ":")).encode("utf-8"), "application/json"
        resp = self._request(req, body=body, ctype=ctype, timeout=timeout)
        try:
            data = resp.read()
        except Deadline:
            resp.close()
            raise RequestTimeout("%s %s: the answer did not end within its timeout" % (req.method, req.path)) from None
        if raw:
            return data
        if resp.status == 204 or not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise ProtocolError("%s %s: not JSON: %r" % (req.method, req.path, data[:200])) from e

    def _body_to(self, resp, dest, limit, what):
        """Read an answer's body whole: its bytes, or, given a binary
        file-like ``dest``, written there (returns how many). More than
        ``limit`` bytes (None: no bound) is a :class:`ProtocolError`."""
        n, parts = 0, []
        try:
            for b in resp.chunks():
                n += len(b)
                if limit is not None and n > limit:
                    resp.close()
                    raise ProtocolError("%s: over %d bytes" % (what, limit))
                if dest is None:
                    parts.append(b)
                else:
                    dest.write(b)
        except Deadline:
            resp.close()
            raise RequestTimeout("%s: not whole within its timeout" % what) from None
        want = resp.headers.get("content-length")
        if want is not None and want.isdigit() and int(want) != n:
            raise ProtocolError("%s: got %d of %s bytes" % (what, n, want))
        return b"".join(parts) if dest is None else n

    # ------------------------------------------------------------------ service
    def health(self):
        """``GET /v1/health``: :class:`~opensandbox.types.Health` (raises when
        the service does not answer)."""
        return Health.from_dict(self._call(_op("GET /v1/health")))

    def openapi(self):
        """The OpenAPI 3.1 document the service serves, as a dict."""
        return self._call(_op("GET /v1/openapi.json"))

    def metrics(self):
        """The service's Prometheus metrics, as text."""
        return self._call(_op("GET /metrics"), raw=True).decode("utf-8", "replace")

    # ------------------------------------------------------------------ sandboxes
    def create(self, *, tier=None, grants=None, env=None, memory_bytes=None, pids=None, cpus=None,
               listen=None, image=None, manifest=None, timeout=None):
        """Make a live sandbox (``POST /v1/sandboxes``) and return its
        :class:`Sandbox` handle.

        ``tier`` "S1" (native programs; the default), "S2" (WebAssembly) or
        "S5" (a microVM); ``grants`` in the command line's syntax
        (``"fs:/data:ro"``, ``"cpu:5J"``; absolute paths; a read-write
        workspace is granted besides); ``env`` added to every exec's
        environment; ``memory_bytes``, ``pids``, ``cpus`` its limits;
        ``listen`` TCP ports its processes may listen on (loopback only);
        ``image`` an imported image; ``manifest`` a signed environment
        manifest (a dict, or its JSON text/bytes)."""
        if isinstance(manifest, (bytes, str)):
            manifest = json.loads(manifest)
        spec = _drop_none({"tier": tier, "grants": list(grants) if grants else None, "env": env,
                           "memory_bytes": memory_bytes, "pids": pids, "cpus": cpus,
                           "listen": list(listen) if listen else None, "image": image, "manifest": manifest})
        return Sandbox(self, SandboxInfo.from_dict(self._call(_op("POST /v1/sandboxes"), spec, timeout=timeout)))

    def list_sandboxes(self, *, here=False):
        """The caller's sandboxes, live then suspended, oldest first
        (``GET /v1/sandboxes``): a list of
        :class:`~opensandbox.types.SandboxInfo`. On a host of a cluster,
        then those the cluster keeps on its other hosts (``host`` names
        the one that holds each; ``state`` may be ``lost``); ``here``:
        the host asked's alone (``?here=true``)."""
        req = _op("GET /v1/sandboxes", {"here": "true" if here else None})
        return [SandboxInfo.from_dict(d) for d in _array(self._call(req), "the sandboxes")]

    def get_sandbox(self, sandbox_id):
        """One sandbox, live or suspended (``GET /v1/sandboxes/{id}``):
        :class:`~opensandbox.types.SandboxInfo`; an unknown one (or another
        token's, or one closed) raises
        :class:`~opensandbox.errors.NotFoundError`."""
        return SandboxInfo.from_dict(self._call(_op("GET /v1/sandboxes/{id}", id=sandbox_id)))

    def sandbox(self, sandbox_id):
        """A :class:`Sandbox` handle for an existing sandbox, live or
        suspended, read from the service (:meth:`get_sandbox`)."""
        return Sandbox(self, self.get_sandbox(sandbox_id))

    def remove_sandbox(self, sandbox_id, timeout=None):
        """End a sandbox (``DELETE /v1/sandboxes/{id}``): everything in it
        ends and its workspace goes; a suspended one's record is closed."""
        self._call(_op("DELETE /v1/sandboxes/{id}", id=sandbox_id), timeout=timeout)

    def close_sandbox(self, sandbox_id, timeout=None):
        """End a sandbox's durable run (``POST /v1/sandboxes/{id}/close``): a
        live one is removed, a suspended one abandoned."""
        self._call(_op("POST /v1/sandboxes/{id}/close", id=sandbox_id), timeout=timeout)

    def suspend(self, sandbox_id, timeout=None):
        """Park a live sandbox (``POST /v1/sandboxes/{id}/suspend``): frozen,
        its workspace kept by address, then torn down (S1 processes do not
        survive). Returns the :class:`~opensandbox.types.Snapshot`."""
        return Snapshot.from_dict(self._call(_op("POST /v1/sandboxes/{id}/suspend", id=sandbox_id), timeout=timeout))

    def fork(self, sandbox_id, count, *, suspended=False, timeout=None):
        """Make ``count`` (1 to :data:`MAX_FORK`) sandboxes from a sandbox's
        state (``POST /v1/sandboxes/{id}/fork``): a live one is captured
        between its execs and runs on, a suspended one gives its last
        snapshot. Each child is a new sandbox of the caller's whose record
        cites the parent's; ``suspended`` leaves them suspended. Returns
        :class:`~opensandbox.types.Forked`: every child, with its sandbox or
        the error that stopped it (partial success raises nothing)."""
        spec = {"count": count, "suspended": True} if suspended else {"count": count}
        return Forked.from_dict(self._call(_op("POST /v1/sandboxes/{id}/fork", id=sandbox_id), spec, timeout=timeout))

    def expose_port(self, sandbox_id, port, *, ttl_seconds=None, timeout=None):
        """Expose ``port``, one of a live S1 sandbox's ``listen`` ports, through
        the service's TCP listener (``POST /v1/sandboxes/{id}/ports``) for
        ``ttl_seconds`` (1 to :data:`MAX_PREVIEW_TTL`; None or 0: an hour).
        Returns the :class:`~opensandbox.types.Preview` with its ``url``
        (``https://HOST:PORT/preview/TOKEN/``) and ``token``, said only
        here: whoever has the URL reaches the port, with no bearer token,
        until it expires, is revoked (:meth:`revoke_port`) or the sandbox is
        suspended or closed. Nothing answering on the port, a service
        without a TCP listener (``serve --listen``) or a sandbox of another
        tier is :class:`~opensandbox.errors.UnavailableError`; a port the
        sandbox was not made with :class:`~opensandbox.errors.InvalidError`;
        more than 16 open previews :class:`~opensandbox.errors.LimitError`."""
        spec = {"port": _port(port)}
        if ttl_seconds:
            spec["ttl_seconds"] = int(ttl_seconds)
        return Preview.from_dict(self._call(_op("POST /v1/sandboxes/{id}/ports", id=sandbox_id), spec,
                                            timeout=timeout))

    def list_ports(self, sandbox_id):
        """A live sandbox's open previews (``GET /v1/sandboxes/{id}/ports``):
        a list of :class:`~opensandbox.types.Preview`, by port and expiry,
        without their tokens and URLs."""
        d = self._call(_op("GET /v1/sandboxes/{id}/ports", id=sandbox_id))
        return [Preview.from_dict(p) for p in _array(d.get("previews") if isinstance(d, dict) else d,
                                                     "the previews")]

    def revoke_port(self, sandbox_id, port):
        """Revoke every open preview of ``port`` of a live sandbox
        (``DELETE /v1/sandboxes/{id}/ports/{port}``): each URL is 404 from
        now on and connections through it are cut. Returns how many were
        revoked; none open is :class:`~opensandbox.errors.NotFoundError`."""
        d = self._call(_op("DELETE /v1/sandboxes/{id}/ports/{port}", id=sandbox_id, port=str(_port(port))))
        if not isinstance(d, dict) or not isinstance(d.get("revoked"), int):
            raise ProtocolError("revoking port %d: the service answered %r, not how many were revoked" % (port, d))
        return d["revoked"]

    def resume(self, sandbox_id, timeout=None, *, here=False):
        """Start a suspended sandbox again from its record
        (``POST /v1/sandboxes/{id}/resume``): its workspace restored (at a
        new path), every chunk checked; S2 execs it had parked are
        continued before it answers (``continued``). ``here``: in a cluster,
        resume it on the host asked rather than where the cluster would
        place it (``?here=true``; on a single host it changes nothing).
        Returns its :class:`~opensandbox.types.SandboxInfo`."""
        req = _op("POST /v1/sandboxes/{id}/resume", {"here": "true" if here else None}, id=sandbox_id)
        return SandboxInfo.from_dict(self._call(req, timeout=timeout))

    def seed(self, sandbox_id, source, ref, *, claim=None, origin=None, bearer=None, incarnation=None,
             timeout=None):
        """Seed a live S1 sandbox's workspace with a git checkout
        (``POST /v1/sandboxes/{id}/seed``). ``source``: an absolute path the
        sandbox may read or a credential-free https URL; ``claim`` a
        :class:`~opensandbox.types.Claim` (or dict) binding it to an owner;
        ``bearer`` authorizes an https fetch once. Returns
        :class:`~opensandbox.types.Seeded`."""
        spec = _drop_none({"source": source, "ref": ref,
                           "claim": claim.to_dict() if hasattr(claim, "to_dict") else claim,
                           "origin": origin, "bearer": bearer, "incarnation": incarnation})
        return Seeded.from_dict(self._call(_op("POST /v1/sandboxes/{id}/seed", id=sandbox_id), spec, timeout=timeout))

    def preservation(self, sandbox_id, claim, source, incarnation):
        """The passive preservation receipt of a seeded sandbox for exactly
        this owner ``claim``, ``source`` and ``incarnation``
        (``POST /v1/sandboxes/{id}/preservation``); anything else is
        :class:`~opensandbox.errors.NotFoundError`."""
        spec = {"claim": claim.to_dict() if hasattr(claim, "to_dict") else claim, "source": source,
                "incarnation": incarnation}
        return PreservationReceipt.from_dict(self._call(_op("POST /v1/sandboxes/{id}/preservation", id=sandbox_id),
                                                        spec))

    # ------------------------------------------------------------------ pools
    def pools(self):
        """The service's warm pools and what each did (``GET /v1/pools``)."""
        return [Pool.from_dict(d) for d in _array(self._call(_op("GET /v1/pools")), "the pools")]

    def claim(self, pool, timeout=None):
        """Take a ready sandbox from the warm pool ``pool``
        (``POST /v1/pools/{name}/claim``): it is the caller's now. Returns
        its :class:`Sandbox` handle; no such pool is
        :class:`~opensandbox.errors.NotFoundError`."""
        return Sandbox(self, SandboxInfo.from_dict(self._call(_op("POST /v1/pools/{name}/claim", name=pool),
                                                              timeout=timeout)))

    # ------------------------------------------------------------------ exec and run
    def _stream_spec(self, args, env, dir, deadline_ms, stdin, interrupt_key, jcp):
        if isinstance(args, (str, bytes)):
            raise TypeError("args is the command and its arguments as a list, e.g. ['sh', '-c', %r]" % (args,))
        args = [os.fspath(a) for a in args]
        if not args:
            raise ValueError("args: want the command and its arguments")
        spec = {"args": args, "interrupt_key": interrupt_key or secrets.token_hex(16)}
        if env:
            spec["env"] = dict(env)
        if dir:
            spec["dir"] = dir
        if deadline_ms:
            spec["deadline_ms"] = int(deadline_ms)
        if jcp is not None:
            spec["jcp"] = {"chain": _chain(jcp["chain"]), "invocation": _b64(jcp["invocation"])}
        source = None
        if stdin is not None:
            if isinstance(stdin, str):
                stdin = stdin.encode("utf-8")
            if isinstance(stdin, (bytes, bytearray, memoryview)):
                if len(stdin) <= MAX_STDIN:
                    spec["stdin"] = _b64(stdin)
                else:
                    source = io.BytesIO(bytes(stdin))
            else:
                source = stdin  # a file-like object or an iterable of bytes: streamed
        return spec, source

    def _start(self, req, spec, source, timeout, deadline_ms, capture):
        return ExecStream(self, req, spec, source, _default_timeout(deadline_ms, timeout), capture)

    def exec_stream(self, sandbox_id, args, *, stdin=None, env=None, dir=None, deadline_ms=None,
                    timeout=None, capture=True, interrupt_key=None, jcp=None):
        """Start a command in a live sandbox and return its
        :class:`ExecStream` to iterate (see :meth:`exec` for the arguments)
        as soon as the call is sent. An error before the program starts (an
        unknown sandbox, a program that cannot be run) is raised at the
        first iteration."""
        spec, source = self._stream_spec(args, env, dir, deadline_ms, stdin, interrupt_key, jcp)
        return self._start(_op("POST /v1/sandboxes/{id}/exec", id=sandbox_id), spec, source, timeout, deadline_ms,
                           capture)

    def exec(self, sandbox_id, args, *, stdin=None, env=None, dir=None, deadline_ms=None, timeout=None,
             on_stdout=None, on_stderr=None, stdout=None, stderr=None, capture=True, check=False,
             interrupt_key=None, jcp=None):
        """Run a command in a live sandbox (``POST /v1/sandboxes/{id}/exec``),
        sealed as a run of its own, and return its
        :class:`~opensandbox.types.Result` once sealed.

        ``args``: the command and its arguments (a list). ``stdin``: bytes or
        str (given whole; over 16 MiB it is streamed), or a binary file-like
        object or an iterable of bytes (streamed as the program reads,
        while its output streams back). ``env``, ``dir`` (default: the
        workspace). ``deadline_ms``: the service-side wall-clock limit (0 or
        None: its default, one minute; negative: none): past it the run is
        sealed with outcome ``deadline``. ``timeout``: the client-side limit
        in seconds (default: the service-side deadline plus 30 s; none when
        ``deadline_ms`` is negative): past it the call is interrupted by its
        key and :class:`~opensandbox.errors.ExecTimeout` is raised, carrying
        the sealed result when it comes within the interrupt wait.

        Output: ``on_stdout`` / ``on_stderr`` are called with each piece of
        bytes as it comes; ``stdout`` / ``stderr`` are file-like objects
        written to as it comes (binary, or text: decoded as UTF-8); with
        ``capture`` (the default) the result's ``stdout`` and ``stderr``
        hold all of it. A callback or writer that raises interrupts the call
        (:class:`~opensandbox.errors.OutputError`). ``check``: raise
        :class:`~opensandbox.errors.CommandFailed` unless it exited 0.
        ``jcp``: ``{"chain": [...], "invocation": ...}`` presents the call
        with a JCP chain (envelopes as bytes or standard base64). Ctrl-C
        interrupts the call (its result is waited for, briefly) and is
        raised again. A non-zero exit is not an error: see the result's
        ``exit_code``, ``exit_status`` and ``outcome``."""
        st = self.exec_stream(sandbox_id, args, stdin=stdin, env=env, dir=dir, deadline_ms=deadline_ms,
                              timeout=timeout, capture=capture, interrupt_key=interrupt_key, jcp=jcp)
        return self._drive(st, on_stdout, on_stderr, stdout, stderr, check)

    def run_stream(self, args, *, grants=None, grants_json=None, tier=None, escalate=False, image=None,
                   limits=None, stdin=None, env=None, dir=None, deadline_ms=None, timeout=None, capture=True,
                   interrupt_key=None, jcp=None):
        """Start a one-shot sealed run and return its :class:`ExecStream`
        (see :meth:`run` for the arguments)."""
        spec, source = self._stream_spec(args, env, dir, deadline_ms, stdin, interrupt_key, jcp)
        if grants:
            spec["grants"] = list(grants)
        if grants_json is not None:
            spec["grants_json"] = json.loads(grants_json) if isinstance(grants_json, (str, bytes)) else grants_json
        if tier:
            spec["tier"] = tier
        if escalate:
            spec["escalate"] = True
        if image:
            spec["image"] = image
        if limits is not None:
            lim = limits.to_dict() if isinstance(limits, Limits) else {k: v for k, v in dict(limits).items() if v}
            if lim:
                spec["limits"] = lim
        return self._start(_op("POST /v1/runs"), spec, source, timeout, deadline_ms, capture)

    def run(self, args, *, grants=None, grants_json=None, tier=None, escalate=False, image=None, limits=None,
            stdin=None, env=None, dir=None, deadline_ms=None, timeout=None, on_stdout=None, on_stderr=None,
            stdout=None, stderr=None, capture=True, check=False, interrupt_key=None, jcp=None):
        """A one-shot sealed run through the service (``POST /v1/runs``): what
        ``sandbox run`` does. Returns its :class:`~opensandbox.types.Result`.

        ``grants`` in the command line's syntax (absolute paths),
        ``grants_json`` a set in grants.json's form (a dict or its JSON),
        merged with them; ``tier`` ("S1", "S2", ... or a rung name),
        ``escalate`` to allow a tier above what the grants require,
        ``image`` an imported image for a native run, ``limits`` a
        :class:`~opensandbox.types.Limits` (or dict). ``dir`` defaults to
        ``/``. The rest is as for :meth:`exec`."""
        st = self.run_stream(args, grants=grants, grants_json=grants_json, tier=tier, escalate=escalate,
                             image=image, limits=limits, stdin=stdin, env=env, dir=dir, deadline_ms=deadline_ms,
                             timeout=timeout, capture=capture, interrupt_key=interrupt_key, jcp=jcp)
        return self._drive(st, on_stdout, on_stderr, stdout, stderr, check)

    def _drive(self, st, on_stdout, on_stderr, stdout, stderr, check):
        outs = {"stdout": [f for f in (on_stdout, _writer(stdout)) if f],
                "stderr": [f for f in (on_stderr, _writer(stderr)) if f]}
        try:
            for piece in st:
                for f in outs[piece.stream]:
                    try:
                        f(piece.data)
                    except Exception as e:
                        st.close()
                        raise OutputError("writing the program's %s failed: %r; the call was interrupted"
                                          % (piece.stream, e), result=st.result) from e
        except KeyboardInterrupt:
            st.close()
            raise
        finally:
            if not st._ended:
                st.close()
        r = st.result
        if check and not r.ok:
            raise CommandFailed(r)
        return r

    def interrupt(self, key):
        """Interrupt the caller's call in flight named ``key``
        (``POST /v1/interrupts/{key}``); :class:`~opensandbox.errors.NotFoundError`
        when none is in flight."""
        self._call(_op(_INTERRUPT, key=key))

    def _interrupt_retrying(self, key, wait):
        """Interrupt by key; a 404 (not in flight yet, or no longer) is asked
        again for a moment, as the Go client does. True when taken."""
        end = time.monotonic() + wait
        for _ in range(21):
            try:
                self._call(_op(_INTERRUPT, key=key), timeout=max(0.1, end - time.monotonic()))
                return True
            except NotFoundError:
                if time.monotonic() + 0.1 >= end:
                    return False
                time.sleep(0.1)
        return False

    # ------------------------------------------------------------------ files
    @staticmethod
    def _files(method, sandbox_id, path, **q):
        if not isinstance(path, str):
            path = os.fspath(path)
        return _op(method + " /v1/sandboxes/{id}/files", dict(path=path, **q), id=sandbox_id)

    def upload(self, sandbox_id, path, data, mode=0o644, timeout=None):
        """Write ``data`` (bytes, str, or a binary file-like object or an
        iterable of bytes, streamed) to the absolute ``path`` in a live
        sandbox, under one of its read-write grants, with permission bits
        ``mode`` (``PUT /v1/sandboxes/{id}/files``). The file is written
        beside the target, fsynced and renamed over it. Returns its size."""
        target = self._files("PUT", sandbox_id, path, mode="%o" % (mode & 0o777))
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            resp = self._request(target, body=bytes(data), ctype="application/octet-stream", timeout=timeout)
        else:
            resp = self._request(target, source=data, ctype="application/octet-stream", timeout=timeout)
        try:
            out = json.loads(resp.read())
        except ValueError as e:
            raise ProtocolError("an upload's answer is not JSON") from e
        return int(out.get("size", 0))

    def download(self, sandbox_id, path, dest=None, timeout=None):
        """Read the regular file ``path`` of a live sandbox
        (``GET /v1/sandboxes/{id}/files``). Returns its bytes, or, given a
        binary file-like ``dest``, writes them there and returns how many."""
        resp = self._request(self._files("GET", sandbox_id, path), timeout=timeout)
        return self._body_to(resp, dest, None, "download %s" % path)

    def list_files(self, sandbox_id, path):
        """List directory ``path`` of a live sandbox: a list of
        :class:`~opensandbox.types.FileInfo`."""
        return [FileInfo.from_dict(d) for d in _array(self._call(self._files("GET", sandbox_id, path, list="1")),
                                                      "the listing of %s" % path)]

    # ------------------------------------------------------------------ runs, records, fleets
    def run_report(self, run_id):
        """A sealed run (``b3:…``) as the service verifies it against its own
        key (``GET /v1/runs/{id}``): :class:`~opensandbox.types.RunReport`.
        For a check that does not take the service's word, see
        :meth:`verify_run`."""
        return RunReport.from_dict(self._call(_op("GET /v1/runs/{id}", id=run_id)))

    def records(self):
        """The caller's sandboxes' run records, verified by the service
        (``GET /v1/records``): a list of :class:`~opensandbox.types.Record`."""
        return [Record.from_dict(d) for d in _array(self._call(_op("GET /v1/records")), "the records")]

    def watch(self, sandbox_id, path, on_event, *, recursive=False, timeout=None):
        """Watch directory ``path`` of a live sandbox (``GET
        /v1/sandboxes/{id}/watch``; ``recursive``: every directory beneath
        it too): ``on_event(WatchEvent)`` is called with each event, the
        first ``watching`` (the watch is in place), then ``create``,
        ``modify``, ``delete``, ``rename`` (``from_path`` the old path),
        ``overflow`` (events were lost, ``why``). It returns the last
        event: ``ended`` when the sandbox was suspended, closed or removed
        (``why``), or the one after which ``on_event`` returned False.
        ``timeout`` (default: none) bounds the whole watch
        (:class:`~opensandbox.errors.RequestTimeout`)."""
        req = _op("GET /v1/sandboxes/{id}/watch", {"path": path, "recursive": "true" if recursive else None},
                  id=sandbox_id)
        resp = self._request(req, timeout=timeout or -1)
        try:
            for line in resp.lines():
                if not line.strip():
                    continue
                try:
                    e = WatchEvent.from_dict(json.loads(line))
                except ValueError as err:
                    raise ProtocolError("a malformed watch event: %r" % line[:200]) from err
                if on_event(e) is False or e.op == "ended":
                    return e
        except Deadline:
            raise RequestTimeout("the watch did not end within %.3gs" % timeout) from None
        finally:
            resp.close()
        raise NoResultError("the watch's stream ended without its end")

    def fleet(self, args=None, *, inputs=None, units=None, env=None, dir=None, grants=None, grants_json=None,
              workers=None, checkpoint_every=None, on_progress=None, timeout=None):
        """Run a fleet across the service's workers (``POST /v1/fleets``):
        ``args`` with each of ``inputs`` appended as an item of its own, or
        ``units`` (command lines, one item each); each item a sealed
        one-shot run, ``workers`` at once. ``on_progress(FleetProgress)`` is
        called as items end. Returns :class:`~opensandbox.types.FleetResult`
        once the fleet's checkpoint is signed. ``timeout`` (default: none)
        bounds the whole call: past it the connection is dropped and
        :class:`~opensandbox.errors.RequestTimeout` raised."""
        if isinstance(args, str):
            raise TypeError("args is a list")
        spec = _drop_none({"args": list(args) if args else None, "env": env, "dir": dir,
                           "grants": list(grants) if grants else None,
                           "grants_json": json.loads(grants_json) if isinstance(grants_json, (str, bytes)) else grants_json,
                           "inputs": list(inputs) if inputs else None,
                           "units": [list(u) for u in units] if units else None,
                           "workers": workers, "checkpoint_every": checkpoint_every})
        body = json.dumps(spec).encode("utf-8")
        resp = self._request(_op("POST /v1/fleets"), body=body, ctype="application/json", timeout=timeout or -1)
        try:
            for line in resp.lines():
                if not line.strip():
                    continue
                try:
                    f = json.loads(line)
                except ValueError as e:
                    raise ProtocolError("a malformed fleet frame: %r" % line[:200]) from e
                if f.get("error") is not None:
                    e = f["error"]
                    raise error_from_body(200, e if isinstance(e, dict) else {"message": str(e)}, in_stream=True)
                if f.get("fleet") is not None:
                    return FleetResult.from_dict(f["fleet"])
                p = f.get("progress")
                if p is not None and on_progress is not None:
                    on_progress(FleetProgress(p.get("done", 0), p.get("total", 0)))
        except Deadline:
            raise RequestTimeout("the fleet did not end within %.3gs" % timeout) from None
        finally:
            resp.close()
        raise NoResultError("the fleet's stream ended without its result")

    # ------------------------------------------------------------------ verification
    def host_key(self):
        """The key the service's host seals its runs and records with
        (``GET /v1/key``): ``ed25519:HEX``. It is the service's own word:
        check it out of band (``sandbox key --public`` on its host) before
        trusting what it signs."""
        d = self._call(_op("GET /v1/key"))
        k = d.get("key") if isinstance(d, dict) else None
        if not isinstance(k, str) or not re.match(r"^ed25519:[0-9a-f]{64}$", k):
            raise ProtocolError("GET /v1/key: not a key: %r" % (d,))
        return k

    def run_bundle(self, run_id, dest=None, *, timeout=None, max_bytes=MAX_BUNDLE_BYTES):
        """A sealed run's directory as the service serves it
        (``GET /v1/runs/{id}/bundle``): a tar of ``runs/HEX/NAME`` entries
        (attestation, receipt, journal, logs, unit, grants, decisions).
        Returns its bytes, or, given a binary file-like ``dest``, writes
        them there and returns how many. Nothing is checked here: read it
        with :func:`opensandbox.verify.unpack_run_bundle` or
        :func:`~opensandbox.verify.verify_run_bundle`. More than
        ``max_bytes`` is a :class:`~opensandbox.errors.ProtocolError`."""
        _run_hex(run_id)
        resp = self._request(_op("GET /v1/runs/{id}/bundle", id=run_id), timeout=timeout)
        return self._body_to(resp, dest, max_bytes, "the bundle of %s" % run_id)

    def fetch_run(self, run_id, directory, *, timeout=None, max_bytes=MAX_BUNDLE_BYTES):
        """Fetch a sealed run's files (:meth:`run_bundle`) and write them,
        read as hostile (:func:`opensandbox.verify.unpack_run_bundle`), into
        ``directory/HEX`` (which must not exist yet). Returns that path;
        nothing in it is verified yet (:func:`opensandbox.verify.verify_run_dir`)."""
        with tempfile.TemporaryFile() as f:
            self.run_bundle(run_id, f, timeout=timeout, max_bytes=max_bytes)
            f.seek(0)
            return _verify.unpack_run_bundle(f, run_id, directory, max_total=max_bytes)

    def verify_run(self, run, *, trusted_keys=None, trust_service_key=None, records_dir=None, fetch=None,
                   stdout=None, stderr=None, timeout=None, max_bytes=MAX_BUNDLE_BYTES):
        """Verify a sealed run offline, without taking the service's word:
        the attestation's canonical form, its Ed25519 signature by a trusted
        key and its address (the run id), the unit, grants and decision log
        by their addresses, the JCR-1 receipt (COSE_Sign1, deterministic
        CBOR, its signature, its totals, its unit, signer and interval), the
        journal's hash chain and outcome, and the recorded stdout and stderr
        (see :func:`opensandbox.verify.verify_run_dir`).

        ``run``: a :class:`~opensandbox.types.Result` (its ``stdout`` and
        ``stderr``, when captured whole, are also checked against the sealed
        streams) or a run id.

        Where the run's files come from: ``records_dir`` when given; else,
        for a service on this host (its unix socket), its run directory
        (the result's ``records``, or the state directory's ``runs/HEX``)
        when readable; else (a remote service over TCP, or ``fetch=True``)
        the service's bundle of the run (``GET /v1/runs/{id}/bundle``),
        read as hostile (only regular files ``runs/HEX/NAME``, bounded by
        ``max_bytes``, written to a fresh temporary directory, removed
        after) and verified there. ``fetch=False``: never fetch
        (:class:`~opensandbox.errors.VerificationError` ``unavailable``
        when there is no directory).

        The keys trusted: ``trusted_keys`` (``ed25519:…``; pin the
        service's key, from ``sandbox key --public`` on its host), and,
        with ``trust_service_key=True``, the key the service publishes
        (``GET /v1/key``). **A key fetched from the service proves only
        that the service signed the run**: a service that lies can sign its
        lies with its own key. Over TCP a key must be pinned or
        ``trust_service_key=True`` given (else ``VerificationError``
        ``untrusted-key``, before anything is fetched); on a service of
        this host's unix socket (served only to its own user or root) the
        published key is trusted by default, unless ``trusted_keys`` or
        ``trust_service_key=False`` is given.

        Returns :class:`~opensandbox.verify.VerifiedRun`; raises
        :class:`~opensandbox.errors.VerificationError` (``code``: the
        refusal) when it does not verify."""
        run_id, res = (run.run, run) if isinstance(run, Result) else (run, None)
        hexid = _run_hex(run_id)
        if isinstance(trusted_keys, str):
            trusted_keys = [trusted_keys]
        keys = list(trusted_keys or [])
        local = self.address.kind == "unix"
        if trust_service_key is None:
            trust_service_key = local and not keys
        if not keys and not trust_service_key:
            raise _verify.VerificationError(
                "untrusted-key", run_id, "no key to trust: pin the service's key (trusted_keys=, from `sandbox key "
                "--public` on its host), or pass trust_service_key=True to trust the key it publishes (which "
                "proves only that the service signed the run)")
        if trust_service_key:
            keys.append(self.host_key())
        if res is not None and stdout is None and stderr is None and res.captured:
            stdout, stderr = res.stdout, res.stderr
        if records_dir is None and local and fetch is not True:
            for d in ((res.records if res is not None else None),
                      os.path.join(os.path.dirname(self.address.path), "runs", hexid)):
                if d and os.path.isdir(d) and os.access(d, os.R_OK | os.X_OK):
                    records_dir = d
                    break
        if records_dir is not None:
            if not os.path.isdir(records_dir):
                raise _verify.VerificationError("missing", run_id, "%s is not a directory" % records_dir)
            return _verify.verify_run_dir(records_dir, keys, expect_run=run_id, stdout=stdout, stderr=stderr)
        if fetch is False:
            raise _verify.VerificationError("unavailable", run_id, "its run directory is not readable here, "
                                            "and fetch=False")
        with tempfile.TemporaryFile() as f:
            self.run_bundle(run_id, f, timeout=timeout, max_bytes=max_bytes)
            f.seek(0)
            return _verify.verify_run_bundle(f, keys, run_id, stdout=stdout, stderr=stderr, max_total=max_bytes)

    # ------------------------------------------------------------------ JCP
    def jcp_info(self):
        """``GET /v1/jcp``: the service's host key and the JCP root keys it
        trusts (:class:`~opensandbox.types.JCPInfo`)."""
        return JCPInfo.from_dict(self._call(_op("GET /v1/jcp")))

    def jcp_ledger(self):
        """``GET /v1/jcp/ledger``: every grant the budget ledger admitted and
        its head, as a dict (the operator only)."""
        return self._call(_op("GET /v1/jcp/ledger"))

    def jcp_verify_ledger(self):
        """``POST /v1/jcp/ledger/verify``: the ledger replayed from its files;
        a dict with ``ok`` and, if not, the ``refusal`` (the operator only)."""
        return self._call(_op("POST /v1/jcp/ledger/verify"), {})

    def jcp_verify_chain(self, chain):
        """``POST /v1/jcp/chains/verify``: verify a chain (envelopes as bytes
        or standard base64, root first) from the service's roots at its
        time; a dict with ``ok`` and ``grants``, or ``refusal``."""
        return self._call(_op("POST /v1/jcp/chains/verify"), {"chain": _chain(chain)})

    def jcp_admit(self, chain):
        """``POST /v1/jcp/chains``: verify a chain and admit its grants to the
        ledger; a refusal is :class:`~opensandbox.errors.DeniedError` with
        its ``code``."""
        return self._call(_op("POST /v1/jcp/chains"), {"chain": _chain(chain)})

    def jcp_budgets(self, chain):
        """``POST /v1/jcp/chains/budget``: each grant's budget, root first (a
        list of dicts)."""
        return self._call(_op("POST /v1/jcp/chains/budget"), {"chain": _chain(chain)})

    def jcp_revoke(self, chain, revocation):
        """``POST /v1/jcp/revocations``: record a revocation (an envelope,
        signed by the grant's issuer or an ancestor's) of a grant of the
        chain."""
        return self._call(_op("POST /v1/jcp/revocations"), {"chain": _chain(chain), "revocation": _b64(revocation)})

    def jcp_amend(self, chain, amendment):
        """``POST /v1/jcp/amendments``: record an amendment (signed by the
        grant's issuer; only narrowing) of a grant of the chain."""
        return self._call(_op("POST /v1/jcp/amendments"), {"chain": _chain(chain), "amendment": _b64(amendment)})

    def jcp_policy(self, chain):
        """``POST /v1/jcp/policies``: admit a mint policy, the chain's last
        element (its minter must be the service's key)."""
        return self._call(_op("POST /v1/jcp/policies"), {"chain": _chain(chain)})

    def jcp_event(self, name):
        """``POST /v1/jcp/events``: post ``event:NAME``; a dict of what was
        ``minted`` and ``refused`` (the operator only)."""
        return self._call(_op("POST /v1/jcp/events"), {"name": name})

    def jcp_checkpoint(self, chain, checkpoint):
        """``POST /v1/jcp/checkpoints``: record a checkpoint (signed by the
        grant's audience) of a grant of the chain."""
        return self._call(_op("POST /v1/jcp/checkpoints"), {"chain": _chain(chain), "checkpoint": _b64(checkpoint)})


class Sandbox:
    """A handle on one sandbox of a :class:`Client`: ``id`` and ``info``
    (the :class:`~opensandbox.types.SandboxInfo` last read). Relative paths
    given to its file methods are taken in its workspace (which moves at
    each resumption: the handle follows it). As a context manager it
    removes the sandbox at the end."""

    def __init__(self, client, info):
        self.client, self.info = client, info
        self.id = info.id

    def __repr__(self):
        return "Sandbox(%s, %s)" % (self.id, self.info.state or "?")

    @property
    def workspace(self):
        """The sandbox's read-write workspace directory (as the sandbox sees it)."""
        return self.info.workspace

    def path(self, p="."):
        """``p`` as an absolute path: a relative one is taken in the workspace."""
        p = os.fspath(p)
        if p.startswith("/"):
            return p
        if not self.info.workspace:
            raise SandboxError("sandbox %s has no workspace now (state %s)" % (self.id, self.info.state))
        return os.path.normpath(os.path.join(self.info.workspace, p))

    def refresh(self):
        """Read the sandbox's description again (``info``) and return it."""
        self.info = self.client.get_sandbox(self.id)
        return self.info

    def exec(self, args, **kw):
        """Run a command in it: :meth:`Client.exec`."""
        return self.client.exec(self.id, args, **kw)

    def exec_stream(self, args, **kw):
        """Start a command in it: :meth:`Client.exec_stream`."""
        return self.client.exec_stream(self.id, args, **kw)

    def write_file(self, path, data, mode=0o644):
        """Write a file (relative paths: in the workspace); returns its size."""
        return self.client.upload(self.id, self.path(path), data, mode)

    def read_file(self, path, dest=None):
        """Read a file (relative paths: in the workspace): bytes, or written to ``dest``."""
        return self.client.download(self.id, self.path(path), dest)

    def read_text(self, path, encoding="utf-8"):
        """Read a file as text."""
        return self.read_file(path).decode(encoding)

    def list_files(self, path="."):
        """List a directory (relative paths: in the workspace)."""
        return self.client.list_files(self.id, self.path(path))

    def suspend(self):
        """Park it (:meth:`Client.suspend`); returns the snapshot."""
        snap = self.client.suspend(self.id)
        self.info.state, self.info.workspace = "suspended", ""
        return snap

    def fork(self, count, *, suspended=False):
        """Make ``count`` sandboxes from its state (:meth:`Client.fork`);
        returns the :class:`~opensandbox.types.Forked`, whose children's
        handles :meth:`Client.sandbox` gives."""
        return self.client.fork(self.id, count, suspended=suspended)

    def expose_port(self, port, *, ttl_seconds=None):
        """Expose one of its ``listen`` ports (:meth:`Client.expose_port`);
        returns the :class:`~opensandbox.types.Preview`, with its URL."""
        return self.client.expose_port(self.id, port, ttl_seconds=ttl_seconds)

    def list_ports(self):
        """Its open previews (:meth:`Client.list_ports`)."""
        return self.client.list_ports(self.id)

    def revoke_port(self, port):
        """Revoke the open previews of ``port`` (:meth:`Client.revoke_port`);
        returns how many."""
        return self.client.revoke_port(self.id, port)

    def resume(self, *, here=False):
        """Start it again (:meth:`Client.resume`; ``here``: on the host asked,
        in a cluster); ``info`` is its new description."""
        self.info = self.client.resume(self.id, here=here)
        return self.info

    def close(self):
        """End its durable run (:meth:`Client.close_sandbox`)."""
        self.client.close_sandbox(self.id)
        self.info.state = "closed"

    def remove(self):
        """End it (:meth:`Client.remove_sandbox`)."""
        self.client.remove_sandbox(self.id)
        self.info.state = "removed"

    def seed(self, source, ref, **kw):
        """Seed its workspace with a git checkout: :meth:`Client.seed`."""
        return self.client.seed(self.id, source, ref, **kw)

    def preservation(self, claim, source, incarnation=None):
        """Its preservation receipt: :meth:`Client.preservation` (default
        incarnation: the current one)."""
        return self.client.preservation(self.id, claim, source, incarnation or self.info.incarnation)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.info.state not in ("closed", "removed"):
            try:
                self.remove()
            except NotFoundError:
                pass
        return False


def local_client(state_dir=None, **kw):
    """A :class:`Client` of the service of a state directory (default: the
    CLI's), by its socket."""
    d = state_dir or default_state_dir()
    return Client(Address("unix", path=os.path.join(d, "serve.sock")), **kw)
