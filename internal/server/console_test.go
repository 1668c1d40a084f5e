package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/console"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
)

// The console (`serve --ui`): its page is served to anyone with strict
// headers and nothing of any sandbox in it, needing nothing from
// elsewhere; its views answer only with a token the service was given,
// each token only what is its own, as the API does; bad input is a
// clear error.
func TestConsoleTokensAndHeaders(t *testing.T) {
	const tokA, tokB = "console-aaaaaaaaaaaaaaaa", "console-bbbbbbbbbbbbbbbb"
	h, s, _ := serve(t, tokA, tokB)
	ts := httptest.NewTLSServer(s.WithConsole(s.TCP(s.Handler())))
	defer ts.Close()
	tlsConf := &tls.Config{RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	a, _ := client.Dial(ts.URL, client.Options{Token: tokA, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	ctx := context.Background()
	sb, err := a.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"true"}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := a.Fleet(ctx, client.FleetSpec{Args: []string{"/bin/echo"}, Inputs: []string{"a", "b", "c"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, tok string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	strict := func(path string, resp *http.Response) {
		t.Helper()
		for k, want := range map[string]string{"Content-Security-Policy": console.CSP, "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("%s: %s is %q, want %q", path, k, got, want)
			}
		}
	}
	if !strings.Contains(console.CSP, "frame-ancestors 'none'") || !strings.Contains(console.CSP, "script-src 'self';") ||
		regexp.MustCompile(`https?:|\*|'unsafe-`).MatchString(console.CSP) {
		t.Fatalf("the CSP allows more than the console's own origin: %s", console.CSP)
	}

	t.Run("the page", func(t *testing.T) {
		resp, body := get("/ui/", "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET /ui/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		strict("/ui/", resp)
		if strings.Contains(body, sb.ID) || strings.Contains(body, x.Run) {
			t.Fatal("the page holds a sandbox's data")
		}
		// No inline script; every file it names is served here, and
		// none of them names another origin (the SVG namespace is a name,
		// never fetched).
		for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
			if !strings.Contains(m, `src="`) {
				t.Fatalf("an inline script: %s", m)
			}
		}
		for _, f := range []struct{ name, ctype string }{{"app.js", "text/javascript"}, {"verify.js", "text/javascript"}, {"console.css", "text/css"}, {"", "text/html"}} {
			resp, b := get("/ui/"+f.name, "")
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), f.ctype) {
				t.Fatalf("/ui/%s: %d %s", f.name, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			strict("/ui/"+f.name, resp)
			if m := regexp.MustCompile(`(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^"'\s]*`).FindAllString(b, -1); len(m) > 0 {
				for _, u := range m {
					if u != "http://www.w3.org/2000/svg" {
						t.Fatalf("/ui/%s names another origin: %s", f.name, u)
					}
				}
			}
		}
		for path, want := range map[string]int{"/ui/nope.js": 404, "/ui/..%2fconsole.go": 404, "/ui/assets/app.js": 404, "/ui/%2e%2e/%2e%2e/etc/passwd": 404} {
			if resp, _ := get(path, ""); resp.StatusCode != want {
				t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
			}
		}
		req, _ := http.NewRequest("POST", ts.URL+"/ui/", strings.NewReader("x"))
		if resp, err := ts.Client().Do(req); err != nil || resp.StatusCode != 405 {
			t.Fatalf("POST /ui/: %v %v", resp, err)
		}
		c := *ts.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if resp, err := c.Get(ts.URL + "/ui"); err != nil || resp.StatusCode != 301 || resp.Header.Get("Location") != "/ui/" {
			t.Fatalf("GET /ui: %v %v", resp, err)
		}
	})

	views := []string{"/ui/api/runs", "/ui/api/records/" + sb.ID, "/ui/api/fleets", "/ui/api/fleets/" + fl.ID + "/items/0", "/v1/sandboxes", "/v1/runs/" + x.Run}
	t.Run("no token, or a wrong one, gets nothing", func(t *testing.T) {
		for _, tok := range []string{"", "console-cccccccccccccccc", tokA + "x"} {
			for _, v := range views {
				resp, body := get(v, tok)
				if resp.StatusCode != 401 || strings.Contains(body, sb.ID) || strings.Contains(body, x.Run) || strings.Contains(body, fl.ID) {
					t.Fatalf("GET %s with token %q: %d %s", v, tok, resp.StatusCode, body)
				}
			}
		}
	})

	t.Run("a token sees its own", func(t *testing.T) {
		resp, body := get("/ui/api/runs", tokA)
		strict("/ui/api/runs", resp)
		var runs []client.RunReport
		if err := json.Unmarshal([]byte(body), &runs); err != nil || len(runs) != 1 || runs[0].Run != x.Run || !runs[0].Verified || len(runs[0].Energy) == 0 {
			t.Fatalf("A's runs: %s %v", body, err)
		}
		var rec ConsoleRecord
		if _, body := get("/ui/api/records/"+sb.ID, tokA); json.Unmarshal([]byte(body), &rec) != nil || len(rec.Entries) != 2 || len(rec.Seals) != 2 {
			t.Fatalf("A's record: %s", body)
		}
		var entries [][]byte
		for _, e := range rec.Entries {
			entries = append(entries, []byte(e))
		}
		var seals [][]byte
		for _, e := range rec.Seals {
			seals = append(seals, []byte(e))
		}
		if _, err := record.CheckSeals(sb.ID, entries, seals, func(k key.Public) bool { return k == h.Key.Public() }); err != nil {
			t.Fatalf("the record's seals as the view gives them: %v", err)
		}
		var fls []ConsoleFleet
		if _, body := get("/ui/api/fleets", tokA); json.Unmarshal([]byte(body), &fls) != nil || len(fls) != 1 || fls[0].ID != fl.ID || fls[0].Items != 3 || fls[0].Checkpoint != fl.Checkpoint {
			t.Fatalf("A's fleets: %s", body)
		}
		// The proof the view gives verifies, in Go, under the host's
		// checkpoint key: the page is handed a proof that holds.
		var p struct {
			Item       fleet.Item
			Size       uint64
			Path       []fleet.Node
			Checkpoint string
		}
		if _, body := get("/ui/api/fleets/"+fl.ID+"/items/2", tokA); json.Unmarshal([]byte(body), &p) != nil {
			t.Fatalf("item 2: %s", body)
		}
		vk, _ := (&host.Host{Key: h.Key}).FleetVerifier()
		v, err := note.ParseVerifierKey(vk)
		if err != nil {
			t.Fatal(err)
		}
		c, err := fleet.OpenCheckpoint([]byte(p.Checkpoint), []note.Verifier{v})
		if err != nil || p.Item.Index != 2 || fleet.Verify(c, fleet.Proof{Item: p.Item, Size: p.Size, Path: p.Path}) != nil {
			t.Fatalf("item 2's proof does not verify: %+v %v", p, err)
		}
	})

	t.Run("another token sees none of it", func(t *testing.T) {
		for v, want := range map[string]int{"/ui/api/records/" + sb.ID: 404, "/ui/api/fleets/" + fl.ID + "/items/0": 404, "/v1/runs/" + x.Run: 404} {
			if resp, body := get(v, tokB); resp.StatusCode != want || strings.Contains(body, x.Run+`"`) {
				t.Fatalf("B's GET %s: %d %s", v, resp.StatusCode, body)
			}
		}
		for _, v := range []string{"/ui/api/runs", "/ui/api/fleets"} {
			if resp, body := get(v, tokB); resp.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
				t.Fatalf("B's GET %s: %d %s", v, resp.StatusCode, body)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for path, want := range map[string]string{
			"/ui/api/runs?limit=0":                     `400 query parameter "limit": want 1 to 2000`,
			"/ui/api/runs?limit=x":                     `400 query parameter "limit"`,
			"/ui/api/fleets/" + fl.ID + "/items/3":     `400 item "3": an index from 0 to 2`,
			"/ui/api/fleets/" + fl.ID + "/items/-1":    `400 item "-1"`,
			"/ui/api/fleets/" + fl.ID + "/items/x":     `400 item "x"`,
			"/ui/api/fleets/fl-..%2F..%2Fruns/items/0": `404 fleet`,
			"/ui/api/fleets/nofleet/items/0":           `404 fleet "nofleet"`,
			"/ui/api/records/sb-000000000000":          `404 record "sb-000000000000"`,
			"/ui/api/nothing":                          `404 GET /ui/api/nothing: no such view`,
		} {
			resp, body := get(path, tokA)
			var e client.APIError
			json.Unmarshal([]byte(body), &e)
			if got := fmt.Sprintf("%d %s", resp.StatusCode, e.Message); !strings.HasPrefix(got, want) {
				t.Errorf("GET %s: %s, want %s…", path, got, want)
			}
			strict(path, resp)
		}
	})
}
