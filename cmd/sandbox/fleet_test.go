package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/internal/state"
)

// sandbox fleet as a user runs it: twelve items, each sealed; the
// checkpoint verifies; one item's proof checks alone against it; a
// changed item breaks the fleet's verification.
func TestFleetCommands(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	in := filepath.Join(t.TempDir(), "inputs")
	os.WriteFile(in, []byte(strings.Repeat("x\n", 11)+"last\n"), 0o600)
	// One worker: items end in their order, so the done prefix grows at
	// each and the intermediate checkpoints are published whatever the
	// machine's speed (with several, a slow item 0 could hold the prefix
	// at none until the end). The other fleet tests run several workers.
	out, e, code := sandbox(t, home, "fleet", "run", "--inputs", in, "--workers", "1", "--", guestPath(t, "hello"))
	if code != 0 || !strings.Contains(out, "12 items (0 failed)") {
		t.Fatalf("fleet run: %d %s %s", code, out, e)
	}
	id := strings.Fields(out)[0]
	if out, e, code := sandbox(t, home, "fleet", "verify", id); code != 0 || !strings.HasPrefix(out, "OK    fleet") {
		t.Fatalf("fleet verify: %d %s %s", code, out, e)
	}
	out, e, code = sandbox(t, home, "fleet", "prove", id, "11")
	var p fleet.Proof
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.Item.Index != 11 || p.Size != 12 {
		t.Fatalf("fleet prove: %d %s %s", code, out, e)
	}
	// The item's run is a sealed run in this state directory.
	if _, err := os.Stat(filepath.Join(home, "runs", p.Item.Run.Hex())); err != nil {
		t.Fatalf("item 11's run: %v", err)
	}
	// The proof checks alone, with the checkpoint and this host's key.
	dir := filepath.Join(home, "fleets", id)
	cp, _ := os.ReadFile(filepath.Join(dir, "checkpoint"))
	d, _ := state.Open(home)
	k, _ := d.HostKey(nil)
	vk, _ := (&host.Host{Key: k}).FleetVerifier()
	v, _ := note.ParseVerifierKey(vk)
	c, err := fleet.OpenCheckpoint(cp, []note.Verifier{v})
	if err != nil || fleet.Verify(c, p) != nil {
		t.Fatalf("the proof against the checkpoint: %v", err)
	}
	// It published its done prefix while it ran; the final checkpoint
	// extends each (a log-size proof), and one such proof checks alone.
	sizes, err := host.FleetCheckpoints(dir)
	if err != nil || len(sizes) != 11 {
		t.Fatalf("intermediate checkpoints: %v %v, want one at each size 1 to 11", sizes, err)
	}
	if out, e, code := sandbox(t, home, "fleet", "verify", id); code != 0 || !strings.Contains(out, fmt.Sprintf("%d intermediate checkpoints consistent", len(sizes))) {
		t.Fatalf("fleet verify: %d %s %s", code, out, e)
	}
	out, e, code = sandbox(t, home, "fleet", "prove", id, "--from", strconv.Itoa(sizes[0]))
	cons := filepath.Join(t.TempDir(), "consistency.json")
	os.WriteFile(cons, []byte(out), 0o600)
	if code != 0 {
		t.Fatalf("fleet prove --from: %d %s %s", code, out, e)
	}
	if out, e, code := sandbox(t, home, "fleet", "verify", "--consistency", cons); code != 0 || !strings.Contains(out, fmt.Sprintf("%d items extend to 12", sizes[0])) {
		t.Fatalf("fleet verify --consistency: %d %s %s", code, out, e)
	}
	if _, e, code := sandbox(t, home, "fleet", "prove", id, "--from", "99"); code != 2 {
		t.Fatalf("--from a size never published: %d %s", code, e)
	}
	// History rewritten by the key's holder: item 0 changed, the final
	// checkpoint signed again. It verifies by itself; the checkpoint
	// published before says otherwise.
	items := filepath.Join(dir, "items.jsonl")
	orig, _ := os.ReadFile(items)
	origCP := cp
	f, _, err := host.LoadFleet(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Items[0].Run = addr.Of([]byte("another run"))
	forged, _ := fleet.New(f.Origin, f.Items)
	fcp, _ := forged.Checkpoint(12, (&host.Host{Key: k}).FleetKeyName(), k)
	var fb strings.Builder
	for _, it := range f.Items {
		line, _ := jcs.Marshal(it)
		fb.Write(line)
		fb.WriteByte('\n')
	}
	os.WriteFile(items, []byte(fb.String()), 0o600)
	os.WriteFile(filepath.Join(dir, "checkpoint"), []byte(fcp), 0o600)
	if _, e, code := sandbox(t, home, "fleet", "verify", id); code != 4 || !strings.Contains(e, "checkpoints") {
		t.Fatalf("a rewritten history: %d %s", code, e)
	}
	os.WriteFile(items, orig, 0o600)
	os.WriteFile(filepath.Join(dir, "checkpoint"), origCP, 0o600)

	// An item changed after the fact: the fleet does not verify.
	b, _ := os.ReadFile(items)
	lines := strings.SplitAfter(string(b), "\n")
	lines[3], lines[4] = strings.Replace(lines[4], `"index":4`, `"index":3`, 1), strings.Replace(lines[3], `"index":3`, `"index":4`, 1)
	os.WriteFile(items, []byte(strings.Join(lines, "")), 0o600)
	if _, e, code := sandbox(t, home, "fleet", "verify", id); code != 4 || !strings.Contains(e, "another root") {
		t.Fatalf("a changed fleet: %d %s", code, e)
	}
	// Items out of their order: a verification failure that says so,
	// never an internal error.
	changed := []byte(strings.Join(lines, ""))
	lines = strings.SplitAfter(string(b), "\n")
	lines[3], lines[4] = lines[4], lines[3]
	os.WriteFile(items, []byte(strings.Join(lines, "")), 0o600)
	if _, e, code := sandbox(t, home, "fleet", "verify", id); code != 4 || !strings.Contains(e, "invalid: "+items+": items[3]") || !strings.Contains(e, "index order") {
		t.Fatalf("items out of order: %d %s", code, e)
	}
	os.WriteFile(items, changed, 0o600)
	if _, e, code := sandbox(t, home, "fleet", "prove", id, "12"); code != 2 {
		t.Fatalf("an item past the end: %d %s", code, e)
	}
}

// TestFleetViaTheService: with a service running, 'fleet run' runs the
// fleet there (its directory in the service's state) and says so; the
// fleet verifies; --local runs it here.
func TestFleetViaTheService(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the service needs root here")
	}
	home := t.TempDir()
	startServe(t, home)
	in := filepath.Join(t.TempDir(), "inputs")
	os.WriteFile(in, []byte("a\nb\nc\nd\n"), 0o600)
	out, e, code := runCLI(t, home, "", "fleet", "run", "--inputs", in, "--", guestPath(t, "hello"))
	if code != 0 || !strings.Contains(out, "4 items (0 failed)") {
		t.Fatalf("fleet run via the service: %d %s %s", code, out, e)
	}
	id := strings.Fields(out)[0]
	if n := servedMetric(t, home, "sandbox_fleet_items_total "); n != 4 {
		t.Fatalf("the service ran %d fleet items, want 4", n)
	}
	if out, e, code := runCLI(t, home, "", "fleet", "verify", id); code != 0 || !strings.HasPrefix(out, "OK    fleet") {
		t.Fatalf("fleet verify: %d %s %s", code, out, e)
	}
	if strings.Contains(e, "sandbox: fleet") {
		t.Fatalf("progress on a pipe: %q", e)
	}
	// --local, with stderr on a terminal: progress, items of the whole.
	out, shown, code := runOnTerminal(t, home, "fleet", "run", "--local", "--inputs", in, "--", guestPath(t, "hello"))
	if code != 0 || !strings.Contains(out, "4 items (0 failed)") || !strings.Contains(shown, "\rsandbox: fleet ") || !strings.Contains(shown, "4 of 4 items (100%)") {
		t.Fatalf("fleet run --local on a terminal: %d %s %q", code, out, shown)
	}
	if n := servedMetric(t, home, "sandbox_fleet_items_total "); n != 4 {
		t.Fatalf("--local went to the service: %d items there", n)
	}
}

// TestFleetOfUnits: N units, each item its own command line; each
// item's input is its command line's canonical JSON; a line that is not
// one is refused naming it.
func TestFleetOfUnits(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	hello := guestPath(t, "hello")
	units := filepath.Join(t.TempDir(), "units")
	lines := []string{fmt.Sprintf(`[%q, "one"]`, hello), fmt.Sprintf(`[%q, "two", "three"]`, hello), fmt.Sprintf(`[%q]`, hello)}
	os.WriteFile(units, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	out, e, code := sandbox(t, home, "fleet", "run", "--local", "--units", units)
	if code != 0 || !strings.Contains(out, "3 items (0 failed)") {
		t.Fatalf("fleet run --units: %d %s %s", code, out, e)
	}
	id := strings.Fields(out)[0]
	f, _, err := host.LoadFleet(filepath.Join(home, "fleets", id))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := jcs.Marshal([]string{hello, "two", "three"})
	if f.Items[1].Input != addr.Of(want) {
		t.Fatalf("item 1's input is not its command line's address")
	}
	if out, e, code := sandbox(t, home, "fleet", "verify", id); code != 0 {
		t.Fatalf("verify: %d %s %s", code, out, e)
	}
	os.WriteFile(units, []byte(lines[0]+"\n\"not an array\"\n"), 0o600)
	if _, e, code := sandbox(t, home, "fleet", "run", "--local", "--units", units); code != 2 || !strings.Contains(e, "line 2") {
		t.Fatalf("a bad line: %d %s", code, e)
	}
	if _, e, code := sandbox(t, home, "fleet", "run", "--units", units, "--", hello); code != 2 {
		t.Fatalf("units and a command: %d %s", code, e)
	}
}
