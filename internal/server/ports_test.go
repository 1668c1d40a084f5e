package server

import (
	"net/http"
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

// A sandbox's cookies are kept beneath its own preview's path, never
// the host's root or another domain; what does not parse is dropped.
func TestPreviewCookiesScoped(t *testing.T) {
	h := http.Header{}
	for _, c := range []string{"session=1; Path=/; HttpOnly", "a=2", "b=3; Path=/app; Domain=example.com", "=broken;;", "c=4; Path=relative"} {
		h.Add("Set-Cookie", c)
	}
	scopeCookies(h, "/preview/TOK")
	got := h.Values("Set-Cookie")
	want := []string{"sbp_session=1; Path=/preview/TOK/; HttpOnly", "sbp_a=2; Path=/preview/TOK/", "sbp_b=3; Path=/preview/TOK/app", "sbp_c=4; Path=/preview/TOK/"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Set-Cookie\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Only the cookies a preview's sandbox set are passed back to it, under
// their own names; the host's other cookies never reach the guest.
func TestPreviewCookiesFiltered(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"sso_session=HOST-WIDE-SECRET", ""},
		{"sso_session=x; sbp_a=1; sbp_session=2", "a=1; session=2"},
		{"sbp_=1; sbp_b=2", "b=2"},
	} {
		h := http.Header{}
		if tc.in != "" {
			h.Set("Cookie", tc.in)
		}
		previewCookies(h)
		if got := h.Get("Cookie"); got != tc.want {
			t.Errorf("Cookie %q passed on as %q, want %q", tc.in, got, tc.want)
		}
	}
}
