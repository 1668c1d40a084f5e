// Package h1 is a small HTTP/1.1 client: one request at a time on a
// connection, a body of known length or a chunked stream each way, and
// connections kept for the next request.
//
// It is what package client speaks, so that the thin program
// (cmd/sandbox) starts without linking net/http and crypto/tls, whose
// initialisers and size cost more than the rest of its start
// (docs/cli.md, "Start-up"). It does only what the sandbox API needs:
// no proxies, redirects, cookies, compression, Expect: 100-continue or
// HTTP/2. How a connection is made (a unix socket, TCP, TLS) is the
// caller's Dial.
//
// A response is hostile input: its status line, headers and chunk
// framing are parsed with bounds on every line and on the header's
// size, and anything that is not HTTP/1.x is refused with an error
// naming what was wrong (FuzzResponseAgainstNetHTTP, which also
// compares what it reads with net/http).
package h1
