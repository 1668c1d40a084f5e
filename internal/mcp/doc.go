// Package mcp is the sandbox's Model Context Protocol server (the
// official Go SDK): tools to create a sandbox, run a command in it with
// its output, read, write and list its files, suspend, fork, resume and close
// it, and verify a sealed run and show its receipt. With a JCP principal
// (Options.JCP), every exec is presented with its chain and a fresh
// invocation, and an agent may read its budget, delegate a narrower
// child of its grant and checkpoint; no tool amends or revokes a grant.
//
// Invariants:
//   - Every tool calls the service's API through its client, as the CLI
//     does: the same host, grants, owner and limits; nothing here runs
//     or reads anything itself.
//   - A failure is a JSON-RPC error whose code is the category's
//     (internal/errs.MCPCode), with the category (and a refusal's code)
//     named in its data; a command that ran and exited non-zero is a
//     result, not an error.
//   - A principal's key stays with the Principal, on the side of the
//     process serving the tools; the service gets only what it signed.
//   - A tool's output is bounded (MaxOutput per stream, MaxFile per
//     file); what is cut is said.
//   - A client that goes away mid-exec cancels the call, and the service
//     interrupts the exec and seals it.
package mcp
