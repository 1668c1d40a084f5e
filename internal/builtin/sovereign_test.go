package builtin_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// Paris and its antipode, in micro-degrees.
var (
	paris    = locality.Position{Lat: 48_856_600, Lon: 2_352_200}
	antipode = locality.Position{Lat: -48_856_600, Lon: -177_647_800}
)

// anchors starts two locality anchors (real HTTP servers on loopback),
// both published at Paris, and returns the configuration naming them
// with the regions "paris" (5,000 km around it) and "antipodes" (1,000 km
// around the other side of the Earth), and their clocks. A loopback
// round trip is as long as this machine is busy, so the anchors read a
// stepped clock: each nonce's first answer arrives 40 ms after it was
// sent (6,000 km of light: outside paris, as a loaded host measures),
// every later one 1 ms after (150 km: inside).
func anchors(t *testing.T) (*locality.Config, []*stepClock) {
	t.Helper()
	cfg := &locality.Config{Type: locality.ConfigType, Regions: map[string]locality.Region{
		"paris":     {Centre: paris, RadiusM: 5_000_000},
		"antipodes": {Centre: antipode, RadiusM: 1_000_000},
	}}
	var clocks []*stepClock
	for range 2 {
		k, err := key.Generate(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		c := &stepClock{at: time.Unix(1_800_000_000, 0)}
		a, err := locality.NewAnchor(k, paris, locality.WithClock(c.now))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a)
		t.Cleanup(srv.Close)
		cfg.Anchors = append(cfg.Anchors, locality.ConfigAnchor{PublishedAnchor: a.Published(), URL: srv.URL})
		clocks = append(clocks, c)
	}
	return cfg, clocks
}

// stepClock is an anchor's clock whose readings alternate between a
// challenge's send time and its answer's arrival, the first answer 40 ms
// later, every later one 1 ms. (An anchor reads it once more only when
// its table of waiting nonces is full, which these tests never fill.)
type stepClock struct {
	mu      sync.Mutex
	at      time.Time
	reads   int
	answers int
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.reads%2 == 0 {
		c.answers++
		if c.answers == 1 {
			c.at = c.at.Add(40 * time.Millisecond)
		} else {
			c.at = c.at.Add(time.Millisecond)
		}
	}
	return c.at
}

func (c *stepClock) answered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers
}

func s7Host(t *testing.T, cfg *locality.Config) *host.Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("S7 runs in S1's confinement, which needs root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Home: t.TempDir(), Executors: builtin.Config{S1Helper: helper, Memory: 256 << 20, Pids: 128,
		TEEProvider: "software", Locality: cfg}.Executors})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func s7Run(t *testing.T, h *host.Host, region string) (*host.Run, error) {
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	return h.Run(context.Background(), host.Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "echo sovereign"},
		Grants: hosttest.Grants(t, "locality:"+region)})
}

// TestS7LocalityClaim: a unit granted locality:paris runs at S7 on a host
// whose anchors are near, measured twice because the first round trips
// were slow; its attestation cites a locality claim bound to
// it and evidence bound to a claim that cites it, and its audit trail
// head before it. verify accepts it against the host's configuration,
// refuses it without one (no anchor trusted) and against a configuration
// whose "paris" is elsewhere; a region the host cannot reach is refused
// at seal time, and one it does not know before the run.
func TestS7LocalityClaim(t *testing.T) {
	cfg, clocks := anchors(t)
	h := s7Host(t, cfg)
	r, err := s7Run(t, h, "paris")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range clocks {
		if n := c.answered(); n != 2 {
			t.Errorf("anchor %d answered %d round trips, want 2 (a slow one, then a near one)", i, n)
		}
	}
	c := r.Attestation.Claim
	if r.Choice.Chosen != tier.S7 || c.Type != attest.TypeV4 || c.Locality == nil || c.Locality.Region != "paris" || c.Evidence == nil || c.AuditPrev == nil {
		t.Fatalf("chosen %s, claim %s, locality %+v, evidence %+v, audit_prev %v", r.Choice.Chosen, c.Type, c.Locality, c.Evidence, c.AuditPrev)
	}
	pub := h.Key.Public()
	check := func(v *verify.Verifier) error {
		var out error
		for _, res := range v.Path(r.Dir) {
			if res.Err != nil && out == nil {
				out = res.Err
			}
			if res.Kind == verify.KindLocality && res.Err == nil && !strings.Contains(res.Note, "within paris") {
				t.Errorf("the locality note: %s", res.Note)
			}
		}
		return out
	}
	if err := check(&verify.Verifier{Trust: key.NewTrust(pub), AllowSoftware: true, Locality: cfg}); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := check(&verify.Verifier{Trust: key.NewTrust(pub), AllowSoftware: true}); !errors.Is(err, reject.LocalityUnknownAnchor) {
		t.Fatalf("verify without anchors: %v", err)
	}
	moved := *cfg
	moved.Regions = map[string]locality.Region{"paris": {Centre: antipode, RadiusM: 5_000_000}}
	if err := check(&verify.Verifier{Trust: key.NewTrust(pub), AllowSoftware: true, Locality: &moved}); !errors.Is(err, reject.Invalid) {
		t.Fatalf("verify against another paris: %v", err)
	}
	if _, err := s7Run(t, h, "antipodes"); err == nil || !strings.Contains(err.Error(), "locality-too-far") || !strings.Contains(err.Error(), "measured 3 times") {
		t.Fatalf("a region the host is not in: %v", err)
	}
	if _, err := s7Run(t, h, "atlantis"); !errors.Is(err, tier.ErrUnavailable) || !strings.Contains(err.Error(), "atlantis") {
		t.Fatalf("a region not configured: %v", err)
	}
}

// TestS7UnavailableWithoutLocality: with no locality configuration, S7
// is unavailable and says what it needs.
func TestS7UnavailableWithoutLocality(t *testing.T) {
	h := s7Host(t, nil)
	p := h.Probe(context.Background(), tier.S7)
	if p.Available || !strings.Contains(p.Reason, "SANDBOX_LOCALITY") {
		t.Fatalf("the S7 probe: %+v", p)
	}
	if _, err := s7Run(t, h, "paris"); !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("an S7 run without locality: %v", err)
	}
}
