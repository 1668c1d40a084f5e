// Typed errors. Every error the service answers is `{"category", "message"}`
// with the HTTP status of its category (docs/api.md "Errors"; the map is
// internal/errs): each category has a class here, all of them
// SandboxAPIError, so a caller can `catch (e) { if (e instanceof
// NotFoundError) … }` or switch on `e.category`.

import type { Result } from "./types.js";

/** The error categories of the API (docs/openapi.json, `Error.category`). */
export type ErrorCategory =
  | "internal"
  | "invalid"
  | "not-found"
  | "integrity"
  | "untrusted"
  | "denied"
  | "unavailable"
  | "canceled"
  | "limit";

/**
 * Each category's HTTP status (docs/api.md "Errors"). A 401 (no or unknown
 * token) says category `denied`: {@link UnauthorizedError}.
 */
export const CATEGORY_STATUS: Readonly<Record<ErrorCategory, number>> = Object.freeze({
  invalid: 400,
  denied: 403,
  "not-found": 404,
  limit: 429,
  unavailable: 503,
  integrity: 422,
  untrusted: 403,
  canceled: 499,
  internal: 500,
});

/** The base class of every error this SDK throws. */
export class SandboxError extends Error {
  /** @param message what went wrong */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The body of an error answer, as the service writes it. */
export interface APIErrorBody {
  /** The category (decides the HTTP status). */
  category: string;
  /** What went wrong, for people. */
  message: string;
  /** For a program that cannot be run: 127 not found, 126 not executable. */
  exit_status?: number;
  /** A refusal's code, for a refusal of bytes (a JCP chain or token, a record): `over-ceiling`, `replay`, … */
  code?: string;
}

/**
 * An error the service answered with: its HTTP status, its category, its
 * message, and, where the service gave them, the refusal `code` and the
 * `exitStatus` of a program that cannot be run. The subclasses name the
 * category; {@link apiError} picks the class.
 */
export class SandboxAPIError extends SandboxError {
  /** The HTTP status (0 for an error frame inside a 200 stream: see {@link SandboxAPIError.inStream}). */
  readonly status: number;
  /** The category the service gave (`invalid`, `not-found`, …). */
  readonly category: string;
  /** A refusal's code (JCP refusals, record refusals), if any. */
  readonly code?: string;
  /** For a program that cannot be run: what `sandbox run` exits with (127 not found, 126 not executable). */
  readonly exitStatus?: number;
  /** True when the error came as the last frame of an exec/run/fleet stream rather than as an HTTP status. */
  readonly inStream: boolean;

  /** Made by {@link apiError}; not usually called directly. */
  constructor(status: number, body: APIErrorBody, inStream = false) {
    super(body.message);
    this.status = status;
    this.category = body.category;
    if (body.code) this.code = body.code;
    if (body.exit_status !== undefined) this.exitStatus = body.exit_status;
    this.inStream = inStream;
  }
}

/** 400 `invalid`: malformed input, a bad grant or tier, a relative path, a program that cannot be run. */
export class InvalidError extends SandboxAPIError {}
/** 403 `denied`: a grant the caller may not give, a path outside the sandbox's grants, a JCP refusal. */
export class DeniedError extends SandboxAPIError {}
/** 401 (category `denied`): no bearer token, or one the service was not given. */
export class UnauthorizedError extends DeniedError {}
/** 404 `not-found`: an unknown sandbox (or another token's), a missing file, no such pool, no such call. */
export class NotFoundError extends SandboxAPIError {}
/** 429 `limit`: too many sandboxes or execs, a body or upload over its bound. */
export class LimitError extends SandboxAPIError {}
/** 503 `unavailable`: a tier this host cannot give; an S2 exec parked by a suspension. */
export class UnavailableError extends SandboxAPIError {}
/** 422 `integrity`: a sealed file failed verification. */
export class IntegrityError extends SandboxAPIError {}
/** 403 `untrusted`: valid, but signed by a key the service does not trust. */
export class UntrustedError extends SandboxAPIError {}
/** 499 `canceled`: the call was stopped. */
export class CanceledError extends SandboxAPIError {}
/** 500 `internal`, or an answer that was not the API's error form. */
export class InternalError extends SandboxAPIError {}

const byCategory: Record<ErrorCategory, new (status: number, body: APIErrorBody, inStream?: boolean) => SandboxAPIError> = {
  invalid: InvalidError,
  denied: DeniedError,
  "not-found": NotFoundError,
  limit: LimitError,
  unavailable: UnavailableError,
  integrity: IntegrityError,
  untrusted: UntrustedError,
  canceled: CanceledError,
  internal: InternalError,
};

/**
 * The typed error for an error answer: a 401 is {@link UnauthorizedError},
 * otherwise the class of its category (an unknown category is a plain
 * {@link SandboxAPIError}).
 */
export function apiError(status: number, body: APIErrorBody, inStream = false): SandboxAPIError {
  if (status === 401) return new UnauthorizedError(status, body, inStream);
  const C = (byCategory as Record<string, (typeof byCategory)[ErrorCategory] | undefined>)[body.category] ?? SandboxAPIError;
  return new C(status, body, inStream);
}

/** The service could not be reached: nothing listens on the socket, the host refused, TLS failed. */
export class ConnectionError extends SandboxError {
  /** The address that was dialled. */
  readonly address: string;
  /** @param address the service's address; @param cause the underlying error */
  constructor(address: string, cause: unknown) {
    super(`no sandbox service answers at ${address}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.address = address;
  }
}

/** A stream (exec, run, fleet) ended without its result: the connection broke. */
export class NoResultError extends SandboxError {
  constructor(message = "the service's stream ended without a result") {
    super(message);
  }
}

/**
 * An exec or run ended by its caller: its client-side `timeoutMs` passed
 * ({@link TimeoutError}) or its `signal` aborted ({@link AbortError}). The
 * SDK interrupted the call by its key and waited for the sealed result:
 * `result` is that result (the run is sealed as interrupted), or
 * undefined when it did not come within the interrupt wait.
 */
export class CallEndedError extends SandboxError {
  /** The sealed result of the interrupted call, when it came. */
  readonly result?: Result;
  /** The interrupt key the call was named by. */
  readonly interruptKey: string;
  /** @internal */
  constructor(message: string, interruptKey: string, result?: Result, cause?: unknown) {
    super(message, { cause });
    this.interruptKey = interruptKey;
    if (result) this.result = result;
  }
}

/** A call's client-side deadline (`timeoutMs`) passed: it was interrupted, and rejected. */
export class TimeoutError extends CallEndedError {}

/** A call's `signal` aborted: it was interrupted, and rejected. Its `name` is "AbortError". */
export class AbortError extends CallEndedError {}

/**
 * A callback given a call's output (`onStdout`, `onStderr`) threw: the call
 * was interrupted because of it, as the Go client does for a failed write.
 * `result` is the sealed result when it came; `cause` is what the callback threw.
 */
export class OutputError extends CallEndedError {}

/**
 * A record that does not verify: `code` is the refusal code of the
 * specification (docs/spec/canonical.md, attestation.md, receipt.md,
 * run-directory.md: `signature`, `weak-key`, `untrusted-key`, `address`,
 * `non-canonical`, …), `where` the member or file it is about.
 */
export class VerificationError extends SandboxError {
  /** The refusal code. */
  readonly code: string;
  /** Where: a member (`claim.unit`), a byte offset, or a file. */
  readonly where: string;
  /** @param code the refusal code; @param where the member or file; @param detail why */
  constructor(code: string, where: string, detail: string) {
    super(`${code}: ${where ? where + ": " : ""}${detail}`);
    this.code = code;
    this.where = where;
  }
}
