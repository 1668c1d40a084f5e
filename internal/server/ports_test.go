package server

import (
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

// The log says a preview's path with its token's address, never the
// token; other paths as they are.
func TestLogPathHidesPreviewTokens(t *testing.T) {
	tok := strings.Repeat("T", 43)
	a := addr.Of([]byte(tok)).String()
	for _, tc := range []struct{ in, want string }{
		{"/v1/sandboxes", "/v1/sandboxes"},
		{"/preview/", "/preview/"},
		{"/preview/" + tok, "/preview/" + a},
		{"/preview/" + tok + "/", "/preview/" + a + "/"},
		{"/preview/" + tok + "/a/b?c", "/preview/" + a + "/a/b?c"},
		{"/preview/x", "/preview/" + addr.Of([]byte("x")).String()},
	} {
		if got := logPath(tc.in); got != tc.want || strings.Contains(got, tok) {
			t.Errorf("logPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
