// Package safefile writes files that survive a crash: a write is either
// wholly there after a crash or not there at all, never partial.
//
// The discipline: write a temporary file in the same directory, fsync it,
// rename (or link, for create-only) it into place, then fsync the
// directory so the new name itself is durable.
package safefile
