// Package server is the host service: the host API over HTTP/JSON
// (docs/api.md, docs/openapi.json), on a unix socket in the state
// directory (mode 0600; only a peer with the socket owner's uid, or
// root, is served) and optionally on TCP with TLS and bearer tokens,
// where each token sees only the sandboxes it created.
//
// It calls the host and nothing else: every run it starts is assembled,
// metered and sealed by package host exactly as the CLI's are. Errors
// become HTTP statuses through the one category map (package errs).
// JCP's operations (/v1/jcp/…) verify and record tokens the caller
// signed through the host's gate and its ledger; the service never
// holds a principal's key, and a caller acts on the chains it presents
// (the whole ledger and events are the operator's).
// Logs are structured (slog), one line per request and per sealed run.
package server
