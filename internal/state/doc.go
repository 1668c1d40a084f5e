// Package state is the state directory: everything this host keeps between
// runs lives under one root, which $SANDBOX_HOME overrides.
//
// Layout (docs/spec/state.md):
//
//	host.key   the host's Ed25519 key, mode 0600, made on first use
//	host.pub   its public key, for people and other verifiers
//
// The host key is created exactly once: racing first uses agree on one key
// (create-exclusive), and a key file that others can read is refused rather
// than used.
package state
