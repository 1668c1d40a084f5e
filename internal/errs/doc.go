// Package errs is the one place where errors become categories, and
// categories become exit codes, HTTP statuses and MCP error codes.
//
// The categories are a closed set. Every front end (the CLI, the server,
// the MCP tools) asks Of(err) and then the mapping it needs; none of them
// decides on its own what an error means to its transport.
package errs
