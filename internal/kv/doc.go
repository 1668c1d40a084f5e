// Package kv is the key-value store units reach through kv grants: one
// directory per namespace under the state directory, one file per key,
// named by the key's hex encoding.
//
// A put is durable when it returns (written to a temporary file, fsynced,
// renamed, directory fsynced), so a crash leaves the old value or the new,
// never a partial one. Keys are 1 to MaxKey bytes, values at most MaxValue.
// The store itself grants nothing: callers ask the Enforcer first.
package kv
