"""The test service: a real ``sandbox serve``, built and started once for the
whole test run, stopped and cleaned up at its end.

It builds the three binaries (``sandbox``, ``sandbox-engine``,
``sandbox-s1``) into a temporary directory with ``go build`` (or takes
them from ``$OPENSANDBOX_TEST_BINDIR``), starts ``sandbox serve`` with a
temporary ``SANDBOX_HOME`` and ``TMPDIR`` (so its workspaces are made
there too), a warm pool ``warm`` of one, and, where ``openssl`` is
installed, TCP on 127.0.0.1 with TLS (a self-signed certificate made for
it) and two bearer tokens. At the end (atexit, also on SIGTERM) it stops
the service with SIGTERM (then SIGKILL to its own process group), unmounts
what the service left mounted under its directory, detaches the loop
devices backed there, and removes the directory.
"""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
REPO = os.path.normpath(os.path.join(SDK, "..", ".."))
sys.path.insert(0, os.path.join(SDK, "src"))

TOKEN_A = "token-a-" + "a" * 24
TOKEN_B = "token-b-" + "b" * 24
OPENAPI = os.path.join(REPO, "docs", "openapi.json")

#: Every request the SDK sent in this test run, as (op, method, target):
#: tests/recorded.py checks them against the OpenAPI document at the end.
SENT = []


def _record(op, method, target):
    SENT.append((op, method, target))


from opensandbox import _http  # noqa: E402  (after the path is set)

if _record not in _http.request_observers:
    _http.request_observers.append(_record)


class Service:
    """A running ``sandbox serve`` and what a test needs of it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="opensandbox-sdk-test-")
        self.proc = None
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _build(self):
        given = os.environ.get("OPENSANDBOX_TEST_BINDIR")
        if given:
            return given
        bindir = os.path.join(self.root, "bin")
        os.makedirs(bindir)
        env = dict(os.environ)
        steps = [
            (["go", "build", "-o", os.path.join(bindir, "sandbox"), "./cmd/sandbox"], {"CGO_ENABLED": "0"}),
            (["go", "build", "-o", os.path.join(bindir, "sandbox-engine"), "./cmd/sandbox-engine"], {}),
            (["go", "build", "-trimpath", "-o", os.path.join(bindir, "sandbox-s1"), "./cmd/sandbox-s1"],
             {"CGO_ENABLED": "0"}),
        ]
        for argv, extra in steps:
            e = dict(env)
            e.update(extra)
            subprocess.run(argv, cwd=REPO, env=e, check=True)
        return bindir

    def _tls(self):
        self.openssl = shutil.which("openssl")
        if not self.openssl:
            return None
        d = os.path.join(self.root, "tls")
        os.makedirs(d)
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run([self.openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-keyout", key, "-out", cert, "-days", "2", "-nodes", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return cert, key

    def _start(self):
        self.bindir = self._build()
        self.sandbox = os.path.join(self.bindir, "sandbox")
        self.home = os.path.join(self.root, "home")
        self.tmp = os.path.join(self.root, "tmp")
        os.makedirs(self.home)
        os.makedirs(self.tmp)
        self.socket = os.path.join(self.home, "serve.sock")
        argv = [self.sandbox, "serve", "--pool", "warm:size=1", "--workspace-max", "256MiB", "--grace", "5s"]
        tls = self._tls()
        self.https = None
        if tls:
            self.cert, key = tls
            tokens = os.path.join(self.root, "tokens")
            with open(tokens, "w") as f:
                f.write("%s\n%s\n" % (TOKEN_A, TOKEN_B))
            os.chmod(tokens, 0o600)
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
            s.close()
            argv += ["--listen", "127.0.0.1:%d" % self.port, "--tls-cert", self.cert, "--tls-key", key,
                     "--token-file", tokens]
            self.https = "https://127.0.0.1:%d" % self.port
        env = dict(os.environ)
        for k in ("SANDBOX_HOST", "SANDBOX_TOKEN"):
            env.pop(k, None)
        env.update({"SANDBOX_HOME": self.home, "TMPDIR": self.tmp})
        self.log = os.path.join(self.root, "serve.log")
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(argv, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        from opensandbox import Client
        end = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("sandbox serve exited %d:\n%s" % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.socket):
                try:
                    with Client(self.socket, timeout=5) as c:
                        if c.health().ok and (not self.https or self._tcp_up()):
                            break
                except Exception:
                    pass
            if time.monotonic() > end:
                raise RuntimeError("sandbox serve did not answer within 90 s:\n" + self.log_tail())
            time.sleep(0.1)

    def _tcp_up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def cli(self, *args):
        """Run the ``sandbox`` command line on the service's state directory;
        its stdout, stripped (a failure raises)."""
        env = dict(os.environ)
        for k in ("SANDBOX_HOST", "SANDBOX_TOKEN"):
            env.pop(k, None)
        env.update({"SANDBOX_HOME": self.home, "TMPDIR": self.tmp})
        return subprocess.run([self.sandbox] + list(args), env=env, check=True, capture_output=True,
                              text=True, timeout=60).stdout.strip()

    def log_tail(self, n=4000):
        """The end of the service's log."""
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def client(self, **kw):
        """A client of the unix socket."""
        from opensandbox import Client
        return Client(self.socket, **kw)

    def tcp_client(self, token=TOKEN_A, **kw):
        """A client over TLS with a token (None when openssl is absent)."""
        from opensandbox import Client
        if not self.https:
            return None
        kw.setdefault("ca_file", self.cert)
        return Client(self.https, token=token, **kw)

    def stop(self):
        """Stop the service and remove everything it and the tests made."""
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # its own group: start_new_session
                except ProcessLookupError:
                    pass
                p.wait(10)
        if p is not None and p.poll() is not None:
            try:  # what it started in its own session and left (init processes), by its group
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._unmount()
        shutil.rmtree(self.root, ignore_errors=True)

    def _unmount(self):
        try:
            with open("/proc/self/mounts") as f:
                mounts = [line.split()[1].replace("\\040", " ") for line in f]
        except OSError:
            mounts = []
        for m in sorted((m for m in mounts if m.startswith(self.root + "/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if shutil.which("losetup"):
            out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
            for line in out.splitlines():
                dev, _, rest = line.partition(":")
                if self.root + "/" in rest:
                    subprocess.run(["losetup", "-d", dev], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def leftovers(self):
        """What of this service is still there (for the cleanup check)."""
        left = []
        if os.path.exists(self.root):
            left.append(self.root)
        with open("/proc/self/mounts") as f:
            left += [line.split()[1] for line in f if self.root in line]
        return left


_service = None


def service():
    """The test run's service, started on first use."""
    global _service
    if _service is None:
        _service = Service()
        atexit.register(_stop)
    return _service


def _stop():
    global _service
    if _service is not None:
        s, _service = _service, None
        s.stop()
        left = s.leftovers()
        if left:
            sys.stderr.write("opensandbox tests: left behind: %s\n" % left)


def _on_term(signum, frame):
    raise SystemExit(128 + signum)


try:
    signal.signal(signal.SIGTERM, _on_term)
except ValueError:  # imported off the main thread
    pass


def other_key():
    """A valid Ed25519 public key that is not the service's (the RFC 8032
    test 2 key)."""
    return "ed25519:3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"


def dump(obj):
    """JSON text of obj, for messages."""
    return json.dumps(obj, default=repr)[:2000]


class Operation:
    """One operation of the OpenAPI document: ``op`` ("METHOD /path"),
    ``method``, ``path`` (as the document writes it), ``pattern`` (what its
    concrete paths match) and ``query`` (the names of its query parameters)."""

    def __init__(self, method, path, query):
        import re
        self.method, self.path, self.query = method, path, frozenset(query)
        self.op = "%s %s" % (method, path)
        self.pattern = re.compile("^" + re.sub(r"\\\{[a-z]+\\\}", "[^/?]+", re.escape(path)) + "$")


def openapi_operations(path=OPENAPI):
    """The OpenAPI document's operations, by "METHOD /path"."""
    with open(path) as f:
        doc = json.load(f)
    ops = {}
    for p, item in doc["paths"].items():
        common = item.get("parameters", [])
        for m, o in item.items():
            if m not in ("get", "put", "post", "delete", "patch", "head", "options", "trace"):
                continue
            q = [x["name"] for x in common + o.get("parameters", []) if x.get("in") == "query"]
            op = Operation(m.upper(), p, q)
            ops[op.op] = op
    return ops


def match_request(ops, method, target):
    """The operation of ``ops`` a request (its method and target: the path,
    escaped, and query) is, and the names of its query parameters; None
    when none is."""
    import urllib.parse
    path, _, query = target.partition("?")
    names = [k for k, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)]
    for o in ops.values():
        if o.method == method and o.pattern.match(path):
            return o, names
    return None, names
