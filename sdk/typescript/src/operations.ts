// Which operations of the API (docs/openapi.json: METHOD and path
// template, as the document writes them) each public method of the SDK
// sends. test/suites/parity.ts holds it to the OpenAPI both ways: every
// operation has a method here, every operation here is the document's,
// every method sends only what it says here (recorded), and every request
// the integration tests send is an operation of the document.

/** An operation of the API: `METHOD /path/{template}`, as docs/openapi.json writes it. */
export type Operation = `${"GET" | "POST" | "PUT" | "DELETE" | "PATCH"} /${string}`;

/**
 * Each public method (`Class.method`) that talks to the service, and the
 * operations it may send. A method of the SDK that sends nothing is in
 * {@link LOCAL_METHODS} instead.
 */
export const OPERATIONS = {
  "SandboxClient.health": ["GET /v1/health"],
  "SandboxClient.openapi": ["GET /v1/openapi.json"],
  "SandboxClient.metrics": ["GET /metrics"],
  "SandboxClient.hostKey": ["GET /v1/key"],
  "SandboxClient.create": ["POST /v1/sandboxes"],
  "SandboxClient.claim": ["POST /v1/pools/{name}/claim"],
  "SandboxClient.pools": ["GET /v1/pools"],
  "SandboxClient.list": ["GET /v1/sandboxes"],
  "SandboxClient.get": ["GET /v1/sandboxes/{id}"],
  "SandboxClient.remove": ["DELETE /v1/sandboxes/{id}"],
  "SandboxClient.suspend": ["POST /v1/sandboxes/{id}/suspend"],
  "SandboxClient.fork": ["POST /v1/sandboxes/{id}/fork"],
  "SandboxClient.watch": ["GET /v1/sandboxes/{id}/watch"],
  "SandboxClient.exposePort": ["POST /v1/sandboxes/{id}/ports"],
  "SandboxClient.listPorts": ["GET /v1/sandboxes/{id}/ports"],
  "SandboxClient.revokePort": ["DELETE /v1/sandboxes/{id}/ports/{port}"],
  "SandboxClient.resume": ["POST /v1/sandboxes/{id}/resume"],
  "SandboxClient.closeRecord": ["POST /v1/sandboxes/{id}/close"],
  "SandboxClient.seed": ["POST /v1/sandboxes/{id}/seed"],
  "SandboxClient.preservation": ["POST /v1/sandboxes/{id}/preservation"],
  "SandboxClient.records": ["GET /v1/records"],
  // A call ended by its caller is interrupted by its key.
  "SandboxClient.exec": ["POST /v1/sandboxes/{id}/exec", "POST /v1/interrupts/{key}"],
  "SandboxClient.execStream": ["POST /v1/sandboxes/{id}/exec", "POST /v1/interrupts/{key}"],
  "SandboxClient.run": ["POST /v1/runs", "POST /v1/interrupts/{key}"],
  "SandboxClient.runStream": ["POST /v1/runs", "POST /v1/interrupts/{key}"],
  "SandboxClient.interrupt": ["POST /v1/interrupts/{key}"],
  "SandboxClient.getRun": ["GET /v1/runs/{id}"],
  "SandboxClient.runBundle": ["GET /v1/runs/{id}/bundle"],
  // The bundle where the run directory is not read here; the key only with trustServiceKey.
  "SandboxClient.verifyRun": ["GET /v1/runs/{id}/bundle", "GET /v1/key"],
  "SandboxClient.upload": ["PUT /v1/sandboxes/{id}/files"],
  "SandboxClient.download": ["GET /v1/sandboxes/{id}/files"],
  "SandboxClient.downloadStream": ["GET /v1/sandboxes/{id}/files"],
  "SandboxClient.listFiles": ["GET /v1/sandboxes/{id}/files"],
  "SandboxClient.fleet": ["POST /v1/fleets"],
  "SandboxClient.jcpInfo": ["GET /v1/jcp"],
  "SandboxClient.jcpLedger": ["GET /v1/jcp/ledger"],
  "SandboxClient.jcpVerifyLedger": ["POST /v1/jcp/ledger/verify"],
  "SandboxClient.jcpVerifyChain": ["POST /v1/jcp/chains/verify"],
  "SandboxClient.jcpAdmit": ["POST /v1/jcp/chains"],
  "SandboxClient.jcpBudgets": ["POST /v1/jcp/chains/budget"],
  "SandboxClient.jcpRevoke": ["POST /v1/jcp/revocations"],
  "SandboxClient.jcpAmend": ["POST /v1/jcp/amendments"],
  "SandboxClient.jcpPolicy": ["POST /v1/jcp/policies"],
  "SandboxClient.jcpEvent": ["POST /v1/jcp/events"],
  "SandboxClient.jcpCheckpoint": ["POST /v1/jcp/checkpoints"],
  "Sandbox.refresh": ["GET /v1/sandboxes/{id}"],
  "Sandbox.exec": ["POST /v1/sandboxes/{id}/exec", "POST /v1/interrupts/{key}"],
  "Sandbox.execStream": ["POST /v1/sandboxes/{id}/exec", "POST /v1/interrupts/{key}"],
  "Sandbox.upload": ["PUT /v1/sandboxes/{id}/files"],
  "Sandbox.download": ["GET /v1/sandboxes/{id}/files"],
  "Sandbox.downloadStream": ["GET /v1/sandboxes/{id}/files"],
  "Sandbox.listFiles": ["GET /v1/sandboxes/{id}/files"],
  "Sandbox.suspend": ["POST /v1/sandboxes/{id}/suspend"],
  "Sandbox.fork": ["POST /v1/sandboxes/{id}/fork"],
  "Sandbox.exposePort": ["POST /v1/sandboxes/{id}/ports"],
  "Sandbox.listPorts": ["GET /v1/sandboxes/{id}/ports"],
  "Sandbox.revokePort": ["DELETE /v1/sandboxes/{id}/ports/{port}"],
  "Sandbox.resume": ["POST /v1/sandboxes/{id}/resume"],
  "Sandbox.close": ["POST /v1/sandboxes/{id}/close"],
  "Sandbox.remove": ["DELETE /v1/sandboxes/{id}"],
  "Sandbox.seed": ["POST /v1/sandboxes/{id}/seed"],
  "Sandbox.preservation": ["POST /v1/sandboxes/{id}/preservation"],
  "ExecStream.interrupt": ["POST /v1/interrupts/{key}"],
} as const satisfies Record<string, readonly Operation[]>;

/** The public methods of the client classes that send nothing. */
export const LOCAL_METHODS = ["SandboxClient.narrowed", "SandboxClient.close", "SandboxClient.sandbox"] as const;
