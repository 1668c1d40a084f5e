// Package console is the web console's page (docs/console.md): its
// HTML, CSS and JavaScript, embedded in the binary and served with
// strict headers. It holds no data and asks for none itself: the page,
// in the browser, calls the service's API with the bearer token it is
// given, and checks what it is handed (attestations, receipts, records,
// fleet proofs) with its own code.
//
// Invariants: everything the page needs is served from here (no CDN, no
// remote source: the Content-Security-Policy allows 'self' alone, no
// inline script, no framing); a file not among the page's is 404; only
// GET and HEAD are served. The package imports nothing of the module.
package console
