package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// hostKeys stands in for the cluster's database of host rows: the
// thing under test is how a forwarded request's claim is checked.
type hostKeys struct {
	self string
	k    key.Private
	rows map[string]key.Public
}

func (h hostKeys) Holder(context.Context, string) (Peer, bool, error) { return Peer{}, false, nil }
func (h hostKeys) Peer(_ context.Context, id string) (Peer, error) {
	k, ok := h.rows[id]
	if !ok {
		return Peer{}, errors.New("no such host")
	}
	return Peer{ID: id, Key: k}, nil
}
func (h hostKeys) Self() (string, key.Private) { return h.self, h.k }
func (h hostKeys) TLS() *tls.Config            { return nil }
func (h hostKeys) Place(context.Context, tier.Tier) (Peer, *record.Placement, error) {
	return Peer{}, nil, errors.New("no placement here")
}
func (h hostKeys) Kept(context.Context, string) (tier.Tier, bool, error)       { return 0, false, nil }
func (h hostKeys) Sandboxes(context.Context, string) ([]client.Sandbox, error) { return nil, nil }
func (h hostKeys) PoolHolder(context.Context, string) (Peer, int, bool, error) {
	return Peer{}, 0, false, nil
}

// TestForwardedClaimsChecked: a request that says another host
// forwarded it is served as the caller it names only when the named
// host's key signed exactly it (method, path and query, owner, time,
// narrowing policies) for this host, recently; every other claim is
// refused, 403, and never served as its transport's caller.
func TestForwardedClaimsChecked(t *testing.T) {
	gen := func() key.Private {
		k, err := key.Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	self, peer, stranger := gen(), gen(), gen()
	const selfID, peerID = "host-self", "host-peer"
	s := &Server{Log: slog.New(slog.DiscardHandler), Peers: hostKeys{self: selfID, k: self, rows: map[string]key.Public{peerID: peer.Public()}}}
	var servedAs string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { servedAs = owner(r) })
	now := time.Now().Unix()
	sign := func(k key.Private, to, method, uri, own string, at int64, policies ...string) string {
		return base64.RawURLEncoding.EncodeToString(k.Sign(forwardMessage(peerID, to, method, uri, own, at, policies)))
	}
	for _, c := range []struct {
		name    string
		by, sig string
		at      int64
		uri     string
		policy  string
		served  bool
	}{
		{"signed for this host", peerID, sign(peer, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now), now, "/v1/sandboxes/sb-1/exec?x=1", "", true},
		{"signed with a policy", peerID, sign(peer, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now, policyHeader, "cG9saWN5"), now, "/v1/sandboxes/sb-1/exec?x=1", "cG9saWN5", true},
		{"a policy stripped", peerID, sign(peer, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now, policyHeader, "cG9saWN5"), now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"another path", peerID, sign(peer, selfID, "POST", "/v1/sandboxes/sb-2/exec?x=1", "local", now), now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"meant for another host", peerID, sign(peer, "host-other", "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now), now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"signed by a stranger", peerID, sign(stranger, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now), now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"by no host of the cluster", "host-none", sign(peer, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now), now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"stale", peerID, sign(peer, selfID, "POST", "/v1/sandboxes/sb-1/exec?x=1", "local", now-600), now - 600, "/v1/sandboxes/sb-1/exec?x=1", "", false},
		{"not base64", peerID, "!!", now, "/v1/sandboxes/sb-1/exec?x=1", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			servedAs = ""
			r := httptest.NewRequest("POST", c.uri, strings.NewReader("{}"))
			r.Header.Set(HeaderForwardedBy, c.by)
			r.Header.Set(HeaderForwardedFor, "local")
			r.Header.Set(HeaderForwardedAt, strconv.FormatInt(c.at, 10))
			r.Header.Set(HeaderForwardedSig, c.sig)
			if c.policy != "" {
				r.Header.Set(policyHeader, c.policy)
			}
			w := httptest.NewRecorder()
			s.TCP(next).ServeHTTP(w, r)
			body, _ := io.ReadAll(w.Result().Body)
			if c.served != (servedAs == "local") {
				t.Fatalf("served as %q: %d %s", servedAs, w.Code, body)
			}
			if !c.served && (w.Code != 403 || !strings.Contains(string(body), "a forwarded request")) {
				t.Fatalf("refused as %d %s", w.Code, body)
			}
		})
	}
	// A server in no cluster refuses every such claim.
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.Header.Set(HeaderForwardedBy, peerID)
	w := httptest.NewRecorder()
	(&Server{Log: slog.New(slog.DiscardHandler)}).TCP(next).ServeHTTP(w, r)
	if w.Code != 403 {
		t.Fatalf("no cluster: %d", w.Code)
	}
}
