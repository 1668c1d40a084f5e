"""The errors the SDK raises.

Every one is a :class:`SandboxError`. What the service refused is an
:class:`APIError` of the class of its category (docs/api.md, "Errors";
``internal/errs``): the error body ``{"category", "message"}``, with a
refusal's ``code`` and an unrunnable program's ``exit_status`` where the
service gives them. A 401 (no token, or one the service does not know) is
:class:`UnauthorizedError`, a kind of :class:`DeniedError`.
"""

__all__ = [
    "SandboxError", "APIError", "InvalidError", "DeniedError", "UnauthorizedError",
    "UntrustedError", "NotFoundError", "LimitError", "IntegrityError", "CanceledError",
    "UnavailableError", "InternalError", "ServiceUnreachable", "ProtocolError", "RequestTimeout",
    "NoResultError", "ExecTimeout", "OutputError", "CommandFailed", "VerificationError",
    "CATEGORY_STATUS", "error_from_body",
]


class SandboxError(Exception):
    """The base of every error this SDK raises."""


class APIError(SandboxError):
    """An error the service answered with.

    ``status`` is the HTTP status (for an error frame inside a stream, whose
    HTTP status was already 200, the status of its category),
    ``category`` the API's category (``invalid``, ``denied``, ...),
    ``message`` the service's words, ``code`` a refusal's code
    (``over-ceiling``, ``replay``, ...; ``None`` if none), ``exit_status``
    for a program that cannot be run (127 not found, 126 not executable),
    ``body`` the decoded error object, ``in_stream`` whether it came as an
    ``{"error"}`` frame of a stream."""

    #: the category this class stands for (None: any)
    category_name = None

    def __init__(self, status, category, message, code=None, exit_status=None, body=None, in_stream=False):
        super().__init__(message)
        self.status, self.category, self.message = status, category, message
        self.code, self.exit_status = code, exit_status
        self.body = body if body is not None else {}
        self.in_stream = in_stream

    def __str__(self):
        extra = " (code %s)" % self.code if self.code else ""
        return "%s %s: %s%s" % (self.status, self.category, self.message, extra)


class InvalidError(APIError):
    """400 ``invalid``: bad input (malformed JSON naming the field, a bad
    grant or tier, a relative path, a program that cannot be run: see
    ``exit_status``)."""
    category_name = "invalid"


class DeniedError(APIError):
    """403 ``denied``: a grant the caller may not give, a path outside the
    sandbox's grants, a link on the way, a JCP refusal (with its ``code``)."""
    category_name = "denied"


class UnauthorizedError(DeniedError):
    """401: no bearer token, or one the service was not given. Raised before
    the service reads anything of the request; its body's category is
    ``denied`` (``status`` tells it from a 403)."""


class UntrustedError(APIError):
    """403 ``untrusted``: something whole and validly signed, by a key the
    service does not trust (a bundle's seals, a placement)."""
    category_name = "untrusted"


class NotFoundError(APIError):
    """404 ``not-found``: an unknown sandbox (or another token's), a missing
    file, an unknown run, a pool, an interrupt key not in flight."""
    category_name = "not-found"


class LimitError(APIError):
    """429 ``limit``: too many sandboxes or execs at once, a body, stdin or
    upload over its bound."""
    category_name = "limit"


class IntegrityError(APIError):
    """422 ``integrity``: bytes that do not hash to their address, a record
    that does not verify, a tampered bundle."""
    category_name = "integrity"


class CanceledError(APIError):
    """499 ``canceled``: the caller went away or interrupted the call (a run
    so ended is still sealed)."""
    category_name = "canceled"


class UnavailableError(APIError):
    """503 ``unavailable``: a tier this host cannot give, an S2 exec parked by
    a suspension, a record version this host does not support."""
    category_name = "unavailable"


class InternalError(APIError):
    """500 ``internal`` (and any category this SDK does not know)."""
    category_name = "internal"


#: The one map of internal/errs: each category's HTTP status.
CATEGORY_STATUS = {
    "internal": 500, "invalid": 400, "not-found": 404, "integrity": 422, "untrusted": 403,
    "denied": 403, "unavailable": 503, "canceled": 499, "limit": 429,
}

_BY_CATEGORY = {c.category_name: c for c in (
    InvalidError, DeniedError, UntrustedError, NotFoundError, LimitError, IntegrityError,
    CanceledError, UnavailableError, InternalError)}
_BY_STATUS = {400: InvalidError, 403: DeniedError, 404: NotFoundError, 422: IntegrityError,
              429: LimitError, 499: CanceledError, 503: UnavailableError, 500: InternalError}


def error_from_body(status, body, raw=b"", in_stream=False):
    """The typed :class:`APIError` for an error answer: its HTTP ``status``
    and decoded JSON ``body`` (``raw``, the bytes, when it did not decode).
    The category decides the class; a body without one falls back on the
    status; 401 is always :class:`UnauthorizedError`."""
    if not isinstance(body, dict) or not isinstance(body.get("message"), str) or not body.get("message"):
        text = raw.decode("utf-8", "replace").strip() if raw else ""
        cls = UnauthorizedError if status == 401 else _BY_STATUS.get(status, InternalError)
        cat = "denied" if status == 401 else (cls.category_name or "internal")
        return cls(status, cat, "the service answered %d: %s" % (status, text or "(no body)"),
                   body=body if isinstance(body, dict) else {})
    cat = body.get("category") if isinstance(body.get("category"), str) else ""
    if status == 401:
        cls = UnauthorizedError
    elif cat in _BY_CATEGORY:
        cls = _BY_CATEGORY[cat]
    else:
        cls = _BY_STATUS.get(status, InternalError)
    if in_stream and status == 200:
        status = CATEGORY_STATUS.get(cat, 500)
    code = body.get("code") if isinstance(body.get("code"), str) and body.get("code") else None
    es = body.get("exit_status") if isinstance(body.get("exit_status"), int) and body.get("exit_status") else None
    return cls(status, cat or cls.category_name or "internal", body["message"], code=code,
               exit_status=es, body=body, in_stream=in_stream)


class ServiceUnreachable(SandboxError):
    """Nothing answers at the address (no socket, connection refused, a TLS
    handshake that failed): ``address`` says where it looked. Start one with
    ``sandbox serve &`` or point ``$SANDBOX_HOST`` at one."""

    def __init__(self, address, reason):
        super().__init__("no sandbox service answers at %s: %s" % (address, reason))
        self.address, self.reason = address, reason


class ProtocolError(SandboxError):
    """The service's answer was not HTTP/1.1 or NDJSON as the API says."""


class RequestTimeout(SandboxError, TimeoutError):
    """A call (not an exec or a run: see :class:`ExecTimeout`) got no whole
    answer within its client-side timeout; the connection was dropped."""


class NoResultError(SandboxError):
    """A stream ended without its result frame: the connection broke (the Go
    client's ``ErrNoResult``). ``stdout`` and ``stderr`` hold what came."""

    def __init__(self, message="the service's stream ended without a result", stdout=b"", stderr=b""):
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


class ExecTimeout(SandboxError, TimeoutError):
    """A call ran past its client-side ``timeout``. The SDK then interrupted
    it by its key (``POST /v1/interrupts/{key}``) and waited for its sealed
    result: ``result`` is that result (outcome ``killed``), or ``None`` when
    none came within the wait and the connection was dropped (the service
    seals it all the same). ``stdout`` and ``stderr`` hold the output
    received (when captured), ``timeout`` the limit in seconds."""

    def __init__(self, message, timeout, result=None, stdout=b"", stderr=b""):
        super().__init__(message)
        self.timeout, self.result, self.stdout, self.stderr = timeout, result, stdout, stderr


class OutputError(SandboxError):
    """An output callback or writer raised: the call was interrupted because
    of it, as the Go client does, and ``result`` is its sealed result (or
    None). The callback's exception is the ``__cause__``."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


class CommandFailed(SandboxError):
    """Raised by ``exec(..., check=True)`` and ``run(..., check=True)`` when
    the sealed run did not exit 0: ``result`` is the run."""

    def __init__(self, result):
        o = result.outcome
        super().__init__("the command ended %s (exit status %d, from the %s)" % (
            o.status if o else "without an outcome", result.exit_status, result.exit_status_from or "?"))
        self.result = result


class VerificationError(SandboxError):
    """A sealed run (attestation, receipt, journal, outputs) did not verify
    offline: ``code`` is the specification's refusal code (``signature``,
    ``untrusted-key``, ``address``, ``weak-key``, ``non-canonical``,
    ``missing``, ``unavailable``, ...), ``where`` the file or member,
    ``detail`` why."""

    def __init__(self, code, where, detail=""):
        super().__init__("%s: %s%s" % (code, where, ": " + detail if detail else ""))
        self.code, self.where, self.detail = code, where, detail
