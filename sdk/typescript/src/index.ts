/**
 * The TypeScript SDK of the sandbox service (`sandbox serve`): live
 * sandboxes with streamed exec and files, sealed one-shot runs verified
 * offline against the service's host key, warm pools, fleets, records,
 * and the JCP endpoints. See README.md.
 *
 * @packageDocumentation
 */

export { SandboxClient, Sandbox, resolveAddress, type ClientOptions, type ResumeOptions, type VerifyRunOptions } from "./client.js";
export { OPERATIONS, LOCAL_METHODS, type Operation } from "./operations.js";
export { ExecStream, newInterruptKey, DEFAULT_INTERRUPT_WAIT_MS, type CallOptions, type OutputChunk, type FleetOptions, type WatchOptions } from "./stream.js";
export { stateDir, parseAddress, SOCKET_NAME, POLICY_HEADER, STDIN_STREAM_TYPE, type Endpoint, type Env, type Body } from "./transport.js";
export * from "./errors.js";
export type * from "./types.js";
export * from "./verify/index.js";
