package live

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// stepClock is a host clock a test moves.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// get asks GET path of the HTTP server at the other end of c.
func get(t *testing.T, c net.Conn, path string) (int, string) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := http.NewRequest("GET", "http://localhost"+path, nil)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lastSegments reads sandbox id's record back, verified, and returns its
// last n segments.
func lastSegments(t *testing.T, h *Manager, id string, n int) []record.Segment {
	t.Helper()
	b, err := os.ReadFile(h.RecordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	var segs []record.Segment
	if _, err := record.Walk(b, func(s record.Segment, _ addr.Addr) error { segs = append(segs, s); return nil }); err != nil {
		t.Fatalf("the record does not verify: %v", err)
	}
	if len(segs) < n {
		t.Fatalf("%d segments, want at least %d", len(segs), n)
	}
	return segs[len(segs)-n:]
}

// A preview reaches a listen port only once something listens there,
// only for the owner's sandbox and a port it was made with; it is
// sealed into the record by its token's address, ends at its expiry
// (the host's clock), on revocation (cutting what is open through it)
// and with its sandbox's suspension; each dial is activity.
func TestPreviewOfAListenPort(t *testing.T) {
	h := newS1Host(t)
	clock := &stepClock{now: time.Unix(1_900_000_000, 0)}
	h.Clock = clock.Now
	ctx := context.Background()
	const port = 8765
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Listen: []int{port}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Expose(ctx, info.ID, "", port, 0); errs.Of(err) != errs.Unavailable || !strings.Contains(err.Error(), "answers on port") {
		t.Fatalf("nothing listening yet: %v", err)
	}
	if _, err := h.Expose(ctx, info.ID, "", 9999, 0); errs.Of(err) != errs.Invalid {
		t.Fatalf("a port it was not made with: %v", err)
	}
	for _, ttl := range []time.Duration{time.Millisecond, 25 * time.Hour, -time.Second} {
		if _, err := h.Expose(ctx, info.ID, "", port, ttl); errs.Of(err) != errs.Invalid {
			t.Fatalf("ttl %s: %v", ttl, err)
		}
	}
	if _, err := h.Expose(ctx, info.ID, "someone else", port, 0); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("another owner's sandbox: %v", err)
	}
	if err := os.WriteFile(info.Workspace+"/hello.txt", []byte("hello through the preview\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	execIn(t, h, info.ID, "sh", "-c", "cd "+info.Workspace+" && python3 -m http.server -b 127.0.0.1 8765 >/dev/null 2>&1 &"+
		" for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")

	p, err := h.Expose(ctx, info.ID, "", port, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Token) != 43 || p.ID != addr.Of([]byte(p.Token)) || !p.Expires.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("preview %+v", p)
	}
	seg := lastSegments(t, h, info.ID, 1)[0]
	if seg.Kind != record.Exposed || seg.Port != port || seg.Preview != p.ID || seg.Until != clock.Now().Add(time.Hour).Unix() {
		t.Fatalf("the record's last segment: %+v", seg)
	}
	b, _ := os.ReadFile(h.RecordPath(info.ID))
	if strings.Contains(string(b), p.Token) {
		t.Fatal("the record holds the token")
	}
	list, err := h.Previews(info.ID, "")
	if err != nil || len(list) != 1 || list[0].Token != "" || list[0].ID != p.ID {
		t.Fatalf("previews %+v %v", list, err)
	}
	if _, err := h.Previews(info.ID, "someone else"); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("another owner lists: %v", err)
	}

	sb, _ := h.sandbox(info.ID, "")
	before := sb.activity.Load()
	c, err := h.DialPreview(ctx, p.Token)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, c, "/hello.txt"); code != 200 || body != "hello through the preview\n" {
		t.Fatalf("GET through the preview: %d %q", code, body)
	}
	if sb.activity.Load() <= before {
		t.Fatal("a dial through the preview is not activity for the idle fence")
	}
	for _, tok := range []string{"", "short", strings.Repeat("A", 43), p.Token + "A"} {
		if _, err := h.DialPreview(ctx, tok); !errors.Is(err, ErrNoPreview) {
			t.Fatalf("token %q: %v", tok, err)
		}
	}

	// Expiry, by the host's clock.
	clock.Add(time.Hour - time.Second)
	c, err = h.DialPreview(ctx, p.Token)
	if err != nil {
		t.Fatalf("a second before its expiry: %v", err)
	}
	c.Close()
	clock.Add(time.Second)
	if _, err := h.DialPreview(ctx, p.Token); !errors.Is(err, ErrNoPreview) {
		t.Fatalf("at its expiry: %v", err)
	}
	if list, _ := h.Previews(info.ID, ""); len(list) != 0 {
		t.Fatalf("an expired preview is listed: %+v", list)
	}

	// Revocation cuts what is open.
	p2, err := h.Expose(ctx, info.ID, "", port, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, err := h.DialPreview(ctx, p2.Token)
	if err != nil {
		t.Fatal(err)
	}
	n, err := h.Unexpose(info.ID, "", port)
	if err != nil || n != 1 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	held.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection through a revoked preview still reads: %v", err)
	}
	held.Close()
	if _, err := h.DialPreview(ctx, p2.Token); !errors.Is(err, ErrNoPreview) {
		t.Fatalf("revoked: %v", err)
	}
	if seg := lastSegments(t, h, info.ID, 1)[0]; seg.Kind != record.Unexposed || seg.Preview != p2.ID || seg.Port != port || seg.Reason != "revoked" {
		t.Fatalf("the record's last segment: %+v", seg)
	}
	if _, err := h.Unexpose(info.ID, "", port); !errors.Is(err, ErrNoPreview) || errs.Of(err) != errs.NotFound {
		t.Fatalf("revoke with none open: %v", err)
	}

	// A suspension ends its previews: a resumed sandbox needs new ones.
	p3, err := h.Expose(ctx, info.ID, "", port, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	var ended *PreviewEndedError
	if _, err := h.DialPreview(ctx, p3.Token); !errors.As(err, &ended) {
		t.Fatalf("its sandbox suspended: %v", err)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.DialPreview(ctx, p3.Token); !errors.As(err, &ended) {
		t.Fatalf("its sandbox resumed: %v", err)
	}
	if list, _ := h.Previews(info.ID, ""); len(list) != 0 {
		t.Fatalf("the resumed sandbox lists its last life's previews: %+v", list)
	}
	lastSegments(t, h, info.ID, 1) // the whole record still verifies
}

// Only an S1 sandbox's ports can be previewed: another tier is refused
// saying so.
func TestPreviewRefusedForS2(t *testing.T) {
	h := newS1Host(t)
	info, err := h.Create(context.Background(), SandboxSpec{Tier: tier.S2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Expose(context.Background(), info.ID, "", 8000, 0); errs.Of(err) != errs.Unavailable || !strings.Contains(err.Error(), "only an S1 or S5") {
		t.Fatalf("S2: %v", err)
	}
}
