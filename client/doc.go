// Package client talks to a sandbox service (`sandbox serve`): create a
// live sandbox, exec commands in it with their output streamed as it
// comes, upload, download and list its files, list and remove sandboxes,
// and run one-shot sealed runs, presented with a JCP chain or not; and
// JCP's operations (JCPVerifyChain, JCPAdmit, JCPBudgets, JCPRevoke,
// JCPAmend, JCPPolicy, JCPEvent, JCPCheckpoint, the ledger), with tokens
// the caller signed: a principal's key never goes to the service. Every
// call takes a context; cancelling an exec's context ends the exec,
// which the service seals as interrupted.
//
// The wire format is HTTP/JSON, described by docs/api.md and the OpenAPI
// document the service serves at /v1/openapi.json. The client dials the
// service's unix socket (the state directory's serve.sock) or, for
// "https://…", TCP with the TLS its caller dials (Options.DialTLS: the
// package links no TLS, so that the sandbox command starts small) and a
// bearer token. It speaks HTTP/1.1 itself (internal/h1), keeping
// connections between calls; it does not use net/http, so no proxy
// settings ($HTTPS_PROXY) apply.
package client
