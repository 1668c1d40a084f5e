// Package gitobj reads a git repository's objects the way a host checks
// them, without running git: a branch's commit from its refs, any
// object by its name from loose objects or packs (deltas resolved),
// every object checked against its name (SHA-1 of its type, size and
// content) before it is returned, and a checkout compared file by file
// with a commit's tree.
//
// It exists so that a seed's claimed head is verified from the objects
// the host fetched, read by the host, rather than by asking git in a
// place a guest can change (internal/host, seed.go).
//
// Invariants: every path is opened beneath the repository's directory
// (os.Root), never through a link that leaves it; an object is
// returned only when its content hashes to its name; sizes and delta
// chains are bounded, and malformed bytes are an error naming what and
// where, never a panic. Only SHA-1 repositories are read.
package gitobj
