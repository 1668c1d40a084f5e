// Package egress is the host's egress proxy for S1 runs: the one way out
// of a run's network namespace.
//
// A run reaches it on a listener inside its own namespace (HTTP proxy,
// CONNECT and SOCKS5 on the same port). Every destination is decided by
// the run's Enforcer against its net grants, by name and by resolved
// address: a name that resolves to a loopback, private or otherwise
// internal address is refused unless that address itself was granted (no
// DNS rebinding). Every connection, allowed or refused, is in the run's
// decision log.
//
// Credentials the grants inject (a header whose value the host holds) are
// added by the proxy to requests to that destination only; for HTTPS the
// proxy terminates TLS with a certificate from a per-run authority that
// only that run trusts, whose name constraints admit only the injected
// hosts, and whose key never leaves this process. The secret never enters
// the run.
package egress
