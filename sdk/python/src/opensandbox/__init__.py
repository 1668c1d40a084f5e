"""opensandbox: the Python SDK of the sandbox service (``sandbox serve``).

Standard library only. A synchronous :class:`Client` and an asyncio
:class:`AsyncClient` over the service's HTTP/JSON API (its unix socket, or
https with a bearer token), typed errors from the API's categories
(:mod:`opensandbox.errors`), and offline verification of sealed runs
(:mod:`opensandbox.verify`, on the pure-Python BLAKE3, Ed25519, CBOR and
JCS of :mod:`opensandbox.crypto`).

    from opensandbox import Client
    with Client() as c, c.create() as sb:
        r = sb.exec(["sh", "-c", "echo hi"])
        print(r.exit_code, r.stdout)
"""

from ._version import __version__
from ._http import Address, default_state_dir, resolve
from .client import (Client, ExecStream, Sandbox, local_client, DEFAULT_TIMEOUT, INTERRUPT_WAIT, MAX_FORK,
                     MAX_PREVIEW_TTL, MAX_STDIN, OPERATIONS, POLICY_HEADER, STDIN_STREAM_TYPE)
from .aio import AsyncClient, AsyncExecStream, AsyncSandbox
from .errors import (APIError, CanceledError, CommandFailed, DeniedError, ExecTimeout, IntegrityError,
                     InternalError, InvalidError, LimitError, NoResultError, NotFoundError, OutputError,
                     ProtocolError, RequestTimeout, SandboxError, ServiceUnreachable, UnauthorizedError,
                     UnavailableError, UntrustedError, VerificationError)
from .types import (Claim, Continued, Energy, FileInfo, FleetProgress, FleetResult, ForkChild, Forked, Health, JCPInfo, Limits,
                    Outcome, Output, Pool, PreservationReceipt, Preview, Record, Result, RunReport, SandboxInfo,
                    Seeded, Snapshot, WatchEvent, parse_time)
from .verify import (VerifiedRun, open_receipt, unpack_run_bundle, verify_attestation, verify_journal, verify_run_bundle,
                     verify_run_dir)

__all__ = [
    "__version__", "Address", "default_state_dir", "resolve",
    "Client", "ExecStream", "Sandbox", "local_client", "DEFAULT_TIMEOUT", "INTERRUPT_WAIT", "MAX_FORK",
    "MAX_PREVIEW_TTL", "MAX_STDIN",
    "POLICY_HEADER", "STDIN_STREAM_TYPE",
    "AsyncClient", "AsyncExecStream", "AsyncSandbox",
    "APIError", "CanceledError", "CommandFailed", "DeniedError", "ExecTimeout", "IntegrityError",
    "InternalError", "InvalidError", "LimitError", "NoResultError", "NotFoundError", "OutputError",
    "ProtocolError", "RequestTimeout", "SandboxError", "ServiceUnreachable", "UnauthorizedError",
    "UnavailableError", "UntrustedError", "VerificationError",
    "Claim", "Continued", "Energy", "FileInfo", "FleetProgress", "FleetResult", "ForkChild", "Forked", "Health", "JCPInfo", "Limits",
    "Outcome", "Output", "Pool", "PreservationReceipt", "Preview", "Record", "Result", "RunReport", "SandboxInfo",
    "Seeded", "Snapshot", "WatchEvent", "parse_time",
    "VerifiedRun", "open_receipt", "verify_attestation", "verify_journal", "verify_run_dir", "unpack_run_bundle",
    "verify_run_bundle", "OPERATIONS",
]
