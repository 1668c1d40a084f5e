"""A small HTTP/1.1 client over a unix socket or TLS, standard library only.

Why not http.client: a call whose stdin streams must send its body while
its response streams back (HTTP/1.1 full duplex, docs/api.md "Stdin"), and
every read must give up at a client-side deadline. Here one thread does
all of a connection's I/O with a non-blocking socket and select(): it
sends what is pending of the request while it reads the response, so TLS
is never used from two threads at once. A streamed body is produced by a
thread of its own that only reads the caller's source into a bounded
queue.
"""

import collections
import errno
import os
import select
import socket
import ssl
import threading
import time
import urllib.parse

from ._version import __version__
from .errors import ProtocolError, ServiceUnreachable

SOCKET_NAME = "serve.sock"
USER_AGENT = "opensandbox-python/" + __version__

#: Functions called as ``f(op, method, target)`` for every request this
#: process sends, before it is sent: ``op`` is the API's operation
#: (``"GET /v1/sandboxes/{id}"``, as docs/openapi.json writes it), ``target``
#: the request line's path and query. The tests record what the client sends
#: with it (tests/test_parity.py); a function that raises stops the request.
request_observers = []


class Deadline(Exception):
    """Internal: the call's deadline passed while it waited on the socket."""


class Address:
    """Where a service listens: a unix socket (``kind == "unix"``, ``path``)
    or TCP (``kind == "tcp"``, ``scheme`` https or http, ``host``,
    ``port``)."""

    def __init__(self, kind, path=None, scheme=None, host=None, port=None):
        self.kind, self.path, self.scheme, self.host, self.port = kind, path, scheme, host, port

    @classmethod
    def parse(cls, text):
        """Read an address as the CLI takes one (``$SANDBOX_HOST``): a
        socket's path, ``unix:PATH``, or ``https://HOST:PORT``."""
        if not isinstance(text, str) or not text:
            raise ValueError("an address: a unix socket path, unix:PATH or https://HOST:PORT")
        if text.startswith("unix:"):
            return cls("unix", path=text[5:])
        if text.startswith("/"):
            return cls("unix", path=text)
        u = urllib.parse.urlsplit(text)
        if u.scheme not in ("https", "http") or not u.hostname or u.path not in ("", "/"):
            raise ValueError("%r: want a unix socket path, unix:PATH, or https://HOST:PORT" % text)
        port = u.port or (443 if u.scheme == "https" else 80)
        return cls("tcp", scheme=u.scheme, host=u.hostname, port=port)

    def __str__(self):
        if self.kind == "unix":
            return "unix:" + self.path
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d" % (self.scheme, host, self.port)

    def __repr__(self):
        return "Address(%s)" % self


def default_state_dir(env=None):
    """The state directory as the CLI finds it: ``$SANDBOX_HOME``, else
    ``$XDG_STATE_HOME/sandbox`` (when absolute), else
    ``$HOME/.local/state/sandbox``."""
    env = os.environ if env is None else env
    if env.get("SANDBOX_HOME"):
        return os.path.abspath(env["SANDBOX_HOME"])
    x = env.get("XDG_STATE_HOME", "")
    if x and os.path.isabs(x):
        return os.path.join(x, "sandbox")
    if env.get("HOME"):
        return os.path.join(env["HOME"], ".local", "state", "sandbox")
    raise ValueError("no state directory: set SANDBOX_HOME")


def resolve(address=None, token=None, env=None):
    """The service's address and bearer token as the CLI finds them: the
    arguments, else ``$SANDBOX_HOST`` (with ``$SANDBOX_TOKEN``), else the
    state directory's ``serve.sock``. Returns (Address, token or None)."""
    env = os.environ if env is None else env
    if address is None and env.get("SANDBOX_HOST"):
        address = env["SANDBOX_HOST"]
    if address is None:
        address = os.path.join(default_state_dir(env), SOCKET_NAME)
    addr = address if isinstance(address, Address) else Address.parse(os.fspath(address))
    if token is None and addr.kind == "tcp":
        token = env.get("SANDBOX_TOKEN") or None
    return addr, token


class _Upload:
    """What is still to be sent of a request: bytes pending, and, for a
    streamed body, a producer thread feeding chunks (chunked encoding)."""

    MAX_QUEUED = 16

    def __init__(self, data, source=None, head_len=0):
        self.pending = bytearray(data)
        self.head_len, self.sent = head_len, 0
        self.inflight = b""  # a TLS write being retried must be the same bytes
        self.source = source
        self.done = source is None  # no more data will be added
        self.failed = None  # the producer's exception
        self.broken = None  # why the service stopped taking the body
        self.started = False  # the first bytes are out: a broken pipe is the call's end, not a stale connection
        if source is not None:
            self.q = collections.deque()
            self.cv = threading.Condition()
            self.stopped = False
            self.rwake, self.wwake = socket.socketpair()
            self.rwake.setblocking(False)
            self.wwake.setblocking(False)
            self.thread = threading.Thread(target=self._produce, name="opensandbox-stdin", daemon=True)
            self.thread.start()

    def _produce(self):
        try:
            if hasattr(self.source, "read"):
                def chunks():
                    while True:
                        b = self.source.read(65536)
                        if not b:
                            return
                        yield b
                it = chunks()
            else:
                it = iter(self.source)
            for b in it:
                if isinstance(b, str):
                    b = b.encode("utf-8")
                if not b:
                    continue
                with self.cv:
                    while len(self.q) >= self.MAX_QUEUED and not self.stopped:
                        self.cv.wait()
                    if self.stopped:
                        return
                    self.q.append(bytes(b))
                self._wake()
        except BaseException as e:  # the caller's source failed: end the body, say why
            self.failed = e
        with self.cv:
            self.q.append(None)
        self._wake()

    def _wake(self):
        try:
            self.wwake.send(b"x")
        except OSError:
            pass

    def fill(self):
        """Move what the producer queued into pending (chunk-encoded)."""
        if self.source is None or self.done:
            return
        try:
            while self.rwake.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self.cv:
            while self.q:
                b = self.q.popleft()
                if b is None:
                    self.pending += b"0\r\n\r\n"
                    self.done = True
                    break
                self.pending += b"%x\r\n" % len(b) + b + b"\r\n"
            self.cv.notify_all()

    def abandon(self, err):
        """The service will read no more of the body: drop what is left."""
        self.broken = err
        self.pending.clear()
        self.inflight = b""
        if self.source is not None and not self.done:
            self.done = True
            self.stop()

    @property
    def complete(self):
        """Everything of the request has been sent."""
        return self.done and not self.pending and not self.inflight and self.broken is None

    def wants_write(self):
        return bool(self.pending or self.inflight)

    def wake_fd(self):
        return self.rwake if (self.source is not None and not self.done) else None

    def stop(self):
        """Stop producing (the call ended): the producer exits at its next
        chunk. A producer blocked in the caller's read stays until it returns."""
        if self.source is None:
            return
        with self.cv:
            self.stopped = True
            self.cv.notify_all()
        for s in (self.rwake, self.wwake):
            try:
                s.close()
            except OSError:
                pass


class Connection:
    """One connection to the service: a non-blocking socket and what has
    been read of it."""

    def __init__(self, sock, tls):
        self.sock, self.tls = sock, tls
        sock.setblocking(False)
        self.rbuf = bytearray()
        self.closed = False
        self.used = 0

    def close(self):
        """Close the socket."""
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def stale(self):
        """An idle connection the service closed (readable when it should
        have nothing to say)."""
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r) or bool(self.rbuf)

    def _send(self, up):
        """Send what can be sent now without blocking. Returns "r" or "w"
        when TLS or the socket needs to wait, else None."""
        while True:
            if not up.inflight:
                if not up.pending:
                    return None
                n = min(len(up.pending), 65536)
                up.inflight = bytes(up.pending[:n])
                del up.pending[:n]
            try:
                n = self.sock.send(up.inflight)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                return "w"
            except ssl.SSLWantReadError:
                return "r"
            except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError) as e:
                if not up.started:
                    raise
                # The service stopped reading (the call ended: a program that
                # exits without reading all its stdin ends its call). What
                # it answered is still to be read.
                up.abandon(e)
                return None
            up.inflight = up.inflight[n:]
            up.sent += n
            if up.sent >= up.head_len:
                up.started = True  # the service has the request's head: a refusal may come

    def flush(self, up, resp):
        """Send the request's first bytes (its head, and the body given as
        bytes: not a streamed source's) now, without waiting for the answer;
        bytes that come meanwhile are kept in rbuf. Bounded by
        ``resp.deadline``."""
        while True:
            if not up.wants_write():
                up.started = True
                return
            w = self._send(up)
            if w is None:
                continue
            timeout = None
            if resp.deadline is not None:
                timeout = resp.deadline - time.monotonic()
                if timeout <= 0:
                    raise Deadline()
            select.select([self.sock] if w == "r" else [], [self.sock] if w == "w" else [], [], timeout)
            if w == "r":
                try:
                    data = self.sock.recv(65536)
                    if not data:
                        raise ConnectionResetError(errno.ECONNRESET, "the service closed the connection")
                    self.rbuf += data
                except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass

    def fill(self, up, resp):
        """Read more of the response into rbuf, sending what is pending of
        the request meanwhile; ``resp.deadline`` (read at each wait, so
        another thread may shorten it) bounds the wait. Returns False at
        the end of the stream."""
        while True:
            need_w = False
            if up is not None:
                up.fill()
                if up.wants_write():
                    w = self._send(up)
                    need_w = w == "w"
            try:
                data = self.sock.recv(65536)
                if not data:
                    return False
                self.rbuf += data
                return True
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                pass
            except ssl.SSLWantWriteError:
                need_w = True
            except ssl.SSLZeroReturnError:
                return False
            rl = [self.sock]
            wl = [self.sock] if (need_w or (up is not None and up.wants_write())) else []
            wake = up.wake_fd() if up is not None else None
            if wake is not None:
                rl.append(wake)
            timeout = None
            deadline = resp.deadline
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    raise Deadline()
                timeout = min(timeout, 1.0)
            try:
                select.select(rl, wl, [], timeout)
            except InterruptedError:
                pass


class Response:
    """An HTTP response being read: ``status``, ``reason``, ``headers``
    (lowercase names). Read the body with :meth:`read`, :meth:`chunks` or
    :meth:`lines`; :meth:`close` ends it (the connection goes back to the
    pool when the exchange was whole)."""

    def __init__(self, transport, conn, up, method, deadline):
        self._t, self._c, self._up, self._method = transport, conn, up, method
        self.deadline = deadline
        self.status, self.reason, self.headers = 0, "", {}
        self._mode, self._left, self._done = None, 0, False
        self._cstate = "size"
        self._lbuf = bytearray()
        self._keep = True
        self.received = 0  # bytes of the response read so far

    reused = False
    retryable = False

    def send(self):
        """Send the request's pending bytes now, without reading the answer
        (:meth:`Connection.flush`). A broken connection is
        :class:`ServiceUnreachable` (``retryable`` for a reused idle one)."""
        try:
            self._c.flush(self._up, self)
        except Deadline:
            raise
        except (ConnectionError, ssl.SSLError, OSError) as e:
            self.retryable = self.reused and self.received == 0
            self.close()
            raise ServiceUnreachable(str(self._t.address), "%s: %s" % (type(e).__name__, e)) from e

    # -- the head
    def read_head(self):
        """Read the status line and headers (sending the request meanwhile).
        May be called again after :class:`Deadline` with a later
        ``deadline``. A connection that broke before any answer is
        :class:`ServiceUnreachable`, with ``retryable`` set when it was an
        idle connection reused (nothing of the request was taken)."""
        try:
            self._read_head()
        except Deadline:
            raise
        except (ConnectionError, ssl.SSLEOFError) as e:
            self.retryable = self.reused and self.received == 0
            self.close()
            raise ServiceUnreachable(str(self._t.address), "%s: %s" % (type(e).__name__, e)) from e
        except BaseException:
            self.close()
            raise

    def _read_head(self):
        c = self._c
        while True:
            while b"\r\n\r\n" not in c.rbuf:
                if len(c.rbuf) > 65536:
                    raise ProtocolError("the service's response head is over 64 KiB")
                if not c.fill(self._up, self):
                    if not c.rbuf:
                        raise ConnectionResetError(errno.ECONNRESET, "the service closed the connection before answering")
                    raise ProtocolError("the service closed the connection inside the response head")
                self.received = len(c.rbuf)
            i = c.rbuf.index(b"\r\n\r\n")
            head = bytes(c.rbuf[:i]).decode("latin-1")
            del c.rbuf[:i + 4]
            lines = head.split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError("not an HTTP/1.x status line: %r" % lines[0][:100])
            status = int(parts[1])
            headers = {}
            for line in lines[1:]:
                k, sep, v = line.partition(":")
                if not sep:
                    raise ProtocolError("a malformed header line: %r" % line[:100])
                k, v = k.strip().lower(), v.strip()
                headers[k] = headers[k] + ", " + v if k in headers else v
            if 100 <= status < 200:
                continue  # 100 Continue and the like: the answer follows
            self.status, self.reason, self.headers = status, (parts[2] if len(parts) > 2 else ""), headers
            break
        conn_hdr = headers.get("connection", "").lower()
        if "close" in conn_hdr or parts[0] == "HTTP/1.0":
            self._keep = False
        te = headers.get("transfer-encoding", "").lower()
        if self._method == "HEAD" or status in (204, 304):
            self._mode, self._done = "none", True
        elif "chunked" in te:
            self._mode = "chunked"
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise ProtocolError("a bad Content-Length: %r" % headers["content-length"])
            self._mode = "length"
            self._done = self._left == 0
        else:
            self._mode, self._keep = "eof", False
        if self._done:
            self._finish()

    # -- the body
    def _more(self):
        try:
            return self._c.fill(self._up, self)
        except (ConnectionError, ssl.SSLError) as e:
            raise ProtocolError("the connection to the service broke: %s: %s" % (type(e).__name__, e)) from e

    def _take_line(self, limit=4096):
        c = self._c
        i = c.rbuf.find(b"\r\n")
        if i < 0:
            if len(c.rbuf) > limit:
                raise ProtocolError("a chunked-encoding line over %d bytes" % limit)
            return None
        line = bytes(c.rbuf[:i])
        del c.rbuf[:i + 2]
        return line

    def read_some(self):
        """The next bytes of the body (decoded from chunked encoding), or
        None at its end. All its state is kept here, so after
        :class:`Deadline` it may be called again (with a later deadline)."""
        while True:
            c = self._c
            if self._done:
                return None
            if self._mode == "length":
                if not c.rbuf and not self._more():
                    raise ProtocolError("the service closed the connection %d bytes before the body's end" % self._left)
                n = min(self._left, len(c.rbuf))
                b = bytes(c.rbuf[:n])
                del c.rbuf[:n]
                self._left -= n
                if self._left == 0:
                    self._finish()
                if b:
                    return b
            elif self._mode == "eof":
                if not c.rbuf and not self._more():
                    self._finish()
                    return None
                b = bytes(c.rbuf)
                c.rbuf.clear()
                return b
            elif self._cstate == "size":
                line = self._take_line()
                if line is None:
                    if not self._more():
                        raise ProtocolError("the service closed the connection inside a chunked body")
                    continue
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise ProtocolError("a malformed chunk size: %r" % line[:40])
                self._left, self._cstate = size, ("data" if size else "trailer")
            elif self._cstate == "data":
                if not c.rbuf and not self._more():
                    raise ProtocolError("the service closed the connection inside a chunk")
                n = min(self._left, len(c.rbuf))
                b = bytes(c.rbuf[:n])
                del c.rbuf[:n]
                self._left -= n
                if self._left == 0:
                    self._cstate = "crlf"
                return b
            elif self._cstate == "crlf":
                if len(c.rbuf) < 2:
                    if not self._more():
                        raise ProtocolError("the service closed the connection after a chunk")
                    continue
                if c.rbuf[:2] != b"\r\n":
                    raise ProtocolError("a chunk not followed by CRLF")
                del c.rbuf[:2]
                self._cstate = "size"
            else:  # trailers, then the empty line
                line = self._take_line()
                if line is None:
                    if not self._more():
                        raise ProtocolError("the service closed the connection inside the trailers")
                    continue
                if not line:
                    self._finish()
                    return None

    def chunks(self):
        """The body's bytes as they come (a generator over :meth:`read_some`)."""
        while True:
            b = self.read_some()
            if b is None:
                return
            yield b

    def readline(self):
        """The body's next line, without its newline (a last line without
        one too), or None at its end. Resumable after :class:`Deadline`."""
        while True:
            i = self._lbuf.find(b"\n")
            if i >= 0:
                line = bytes(self._lbuf[:i])
                del self._lbuf[:i + 1]
                return line
            if len(self._lbuf) > (64 << 20):
                raise ProtocolError("a line of the service's stream over 64 MiB")
            b = self.read_some()
            if b is None:
                if self._lbuf:
                    line = bytes(self._lbuf)
                    self._lbuf.clear()
                    return line
                return None
            self._lbuf += b

    def lines(self):
        """The body's lines (a generator over :meth:`readline`)."""
        while True:
            line = self.readline()
            if line is None:
                return
            yield line

    def read(self, limit=None):
        """The whole body (at most ``limit`` bytes are kept)."""
        out = bytearray()
        for b in self.chunks():
            if limit is None or len(out) < limit:
                out += b
        return bytes(out if limit is None else out[:limit])

    def _finish(self):
        self._done = True
        up = self._up
        reusable = self._keep and (up is None or up.complete) and not self._c.rbuf
        if up is not None:
            up.stop()
        if reusable:
            self._t._release(self._c)
        else:
            self._c.close()
        self._c = _Closed

    def close(self):
        """End the exchange: a body not read to its end closes the connection."""
        if not self._done:
            self._done = True
            if self._up is not None:
                self._up.stop()
            self._c.close()
            self._c = _Closed

    @property
    def upload_error(self):
        """The exception the streamed body's source raised, if any."""
        return self._up.failed if self._up is not None and self._up.source is not None else None


class _ClosedConn:
    rbuf = bytearray()

    def fill(self, up, resp):
        return False

    def close(self):
        pass


_Closed = _ClosedConn()


class Transport:
    """Connections to one service, kept for reuse."""

    MAX_IDLE = 8

    def __init__(self, address, token=None, ssl_context=None, ca_file=None, connect_timeout=10.0):
        self.address = address
        self.token = token
        self.connect_timeout = connect_timeout
        self._idle = []
        self._lock = threading.Lock()
        self._ssl = None
        if address.kind == "tcp" and address.scheme == "https":
            if ssl_context is None:
                ssl_context = ssl.create_default_context(cafile=ca_file)
                try:
                    ssl_context.set_alpn_protocols(["http/1.1"])
                except NotImplementedError:  # pragma: no cover
                    pass
            self._ssl = ssl_context

    def _connect(self):
        a = self.address
        try:
            if a.kind == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(self.connect_timeout)
                try:
                    s.connect(a.path)
                except BaseException:
                    s.close()
                    raise
                s.settimeout(None)
                return Connection(s, False)
            s = socket.create_connection((a.host, a.port), timeout=self.connect_timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ssl is not None:
                try:
                    s = self._ssl.wrap_socket(s, server_hostname=a.host)
                except BaseException:
                    s.close()
                    raise
            s.settimeout(None)
            return Connection(s, self._ssl is not None)
        except (FileNotFoundError, ConnectionRefusedError, socket.gaierror, ssl.SSLError,
                socket.timeout, OSError) as e:
            raise ServiceUnreachable(str(a), "%s: %s" % (type(e).__name__, e)) from e

    def _get(self, fresh):
        if not fresh:
            with self._lock:
                while self._idle:
                    c = self._idle.pop()
                    if not c.stale():
                        return c
                    c.close()
        return self._connect()

    def _release(self, c):
        with self._lock:
            if len(self._idle) < self.MAX_IDLE and not c.closed:
                c.used += 1
                self._idle.append(c)
                return
        c.close()

    def close(self):
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def open(self, method, target, body=None, source=None, headers=None, deadline=None, fresh=False, *, op):
        """Start a request on a connection (a pooled one unless ``fresh`` or
        streamed) and return its :class:`Response`, whose head is still to
        be read (:meth:`Response.read_head`). ``op`` names the API's
        operation the request is (``"GET /v1/runs/{id}"``): every request
        names one, and :data:`request_observers` see it. ``body`` is bytes
        (or None); ``source`` (a file-like object or an iterable of bytes)
        is streamed after ``body`` with chunked encoding while the response
        is read. ``deadline`` is a time.monotonic() value (None: none)."""
        if not isinstance(op, str) or op.split(" ", 1)[0] != method:
            raise ValueError("a request names its operation, of its method: %r for %s" % (op, method))
        for f in list(request_observers):
            f(op, method, target)
        a = self.address
        h = [("Host", "sandbox" if a.kind == "unix" else "%s:%d" % (a.host, a.port)),
             ("User-Agent", USER_AGENT), ("Accept-Encoding", "identity")]
        if self.token:
            h.append(("Authorization", "Bearer " + self.token))
        for k, v in (headers or {}).items():
            h.append((k, v))
        body = body or b""
        if source is not None:
            h.append(("Transfer-Encoding", "chunked"))
        elif body or method in ("POST", "PUT", "PATCH"):
            h.append(("Content-Length", str(len(body))))
        head = "%s %s HTTP/1.1\r\n%s\r\n\r\n" % (method, target, "\r\n".join("%s: %s" % kv for kv in h))
        if "\x00" in head or "\n" in target:
            raise ValueError("a NUL or newline in the request head")
        head = head.encode("latin-1")
        if source is not None:
            first = head + (b"%x\r\n" % len(body) + body + b"\r\n" if body else b"")
        else:
            first = head + body
        conn = self._get(fresh=fresh or source is not None)
        resp = Response(self, conn, _Upload(first, source, head_len=len(head)), method, deadline)
        resp.reused = conn.used > 0
        return resp

    def request(self, method, target, body=None, source=None, headers=None, deadline=None, *, op):
        """:meth:`open` and read the response's head; an idle connection the
        service had closed is replaced once. Returns a :class:`Response`;
        raises :class:`Deadline` past ``deadline``."""
        for attempt in (0, 1):
            resp = self.open(method, target, body, source, headers, deadline, fresh=attempt == 1, op=op)
            try:
                resp.read_head()
                return resp
            except Deadline:
                resp.close()
                raise
            except ServiceUnreachable:
                if resp.retryable and attempt == 0 and source is None:
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover
