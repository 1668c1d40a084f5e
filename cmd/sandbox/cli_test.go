package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestJSONContract: --json on run (sealed, refused, not found), runs,
// show, verify, doctor and version gives objects with the documented
// fields (docs/cli-json.md); --id-file names the run; a damaged run is
// listed as damaged and shown with what is damaged.
func TestJSONContract(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	hello := guestPath(t, "hello")
	idFile := filepath.Join(t.TempDir(), "id")

	_, errOut, code := sandbox(t, home, "run", "--json", "--id-file", idFile, "--", hello)
	var r runJSON
	if err := json.Unmarshal([]byte(lastLine(errOut)), &r); err != nil || code != 0 {
		t.Fatalf("run --json: %d %v\n%s", code, err, errOut)
	}
	if !r.Sealed || r.Schema != 1 || r.Tier != "S2" || r.Outcome == nil || r.Outcome.Status != "exited" || r.ExitStatus != 0 ||
		r.ExitFrom != "guest" || len(r.Energy) == 0 || r.Energy[0].Class != "Cpu" || r.Records == "" || !strings.HasPrefix(r.Run, "b3:") {
		t.Errorf("run --json: %+v", r)
	}
	if strings.Contains(errOut, "sandbox: run ") {
		t.Errorf("--json also printed the summary:\n%s", errOut)
	}
	if b, _ := os.ReadFile(idFile); string(b) != r.Run+"\n" {
		t.Errorf("--id-file holds %q, want %q", b, r.Run)
	}

	for _, tc := range []struct {
		args []string
		code int
		from string
	}{
		{[]string{"run", "--json", "--", "/nonexistent"}, 127, "sandbox"},
		{[]string{"run", "--json", "--grant", "gpu:5J", "--", hello}, 125, "sandbox"},
		{[]string{"run", "--json", "--deadline", "300ms", "--", guestPath(t, "spin")}, 124, "sandbox"},
	} {
		_, errOut, code := sandbox(t, home, tc.args...)
		var f runJSON
		if err := json.Unmarshal([]byte(lastLine(errOut)), &f); err != nil || code != tc.code || f.ExitStatus != tc.code || f.ExitFrom != tc.from {
			t.Errorf("%v: exit %d %v %+v\n%s", tc.args, code, err, f, errOut)
		}
	}
	// --json=FILE leaves stderr to the summary.
	jf := filepath.Join(t.TempDir(), "run.json")
	if _, errOut, code := sandbox(t, home, "run", "--json="+jf, "--", hello); code != 0 || !strings.Contains(errOut, "sandbox: run ") {
		t.Fatalf("--json=FILE: %d %s", code, errOut)
	}
	if b, err := os.ReadFile(jf); err != nil || json.Unmarshal(b, &r) != nil || !r.Sealed {
		t.Errorf("--json=FILE: %s %v", b, err)
	}

	out, _, code := sandbox(t, home, "show", "--json", "last")
	var sj showJSON
	if err := json.Unmarshal([]byte(out), &sj); err != nil || code != 0 || sj.Run != r.Run || len(sj.Unit) == 0 || len(sj.Decisions) == 0 || sj.Journal == nil {
		t.Errorf("show --json: %d %v %s", code, err, out)
	}
	out, _, code = sandbox(t, home, "verify", "--json", "--trust-host", "last")
	var vj []verifyJSON
	if err := json.Unmarshal([]byte(out), &vj); err != nil || code != 0 || len(vj) < 6 || !vj[0].OK {
		t.Errorf("verify --json: %d %v %s", code, err, out)
	}
	out, _, code = sandbox(t, home, "doctor", "--json")
	var dj doctorJSON
	if err := json.Unmarshal([]byte(out), &dj); err != nil || code != 0 || len(dj.Tiers) != 8 || dj.Tiers[2].Tier != "S2" || !dj.Tiers[2].Available {
		t.Errorf("doctor --json: %d %v %s", code, err, out)
	}
	out, _, code = sandbox(t, home, "version", "--json")
	var ver versionJSON
	if err := json.Unmarshal([]byte(out), &ver); err != nil || code != 0 || ver.Go == "" || ver.S1Helper == "" {
		t.Errorf("version --json: %d %v %s", code, err, out)
	}

	// Damage: a receipt removed, an attestation overwritten.
	if err := os.Remove(filepath.Join(r.Records, "receipt.cose")); err != nil {
		t.Fatal(err)
	}
	out, _, _ = sandbox(t, home, "runs", "--scan")
	if !strings.Contains(out, "DAMAGED (missing receipt.cose)") {
		t.Errorf("runs --scan does not list the damaged run as damaged:\n%s", out)
	}
	// Listed from the index since: as it was sealed, damage included.
	if out, _, _ = sandbox(t, home, "runs"); !strings.Contains(out, "DAMAGED (missing receipt.cose)") {
		t.Errorf("runs after a scan does not list the damaged run as damaged:\n%s", out)
	}
	out, _, code = sandbox(t, home, "show", r.Run)
	if code != 4 || !strings.Contains(out, "DAMAGED    receipt.cose") {
		t.Errorf("show of a damaged run: %d\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(r.Records, "attestation.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, _ = sandbox(t, home, "runs", "--json", "--scan")
	var rj []runsJSON
	if err := json.Unmarshal([]byte(out), &rj); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range rj {
		if e.Records == r.Records {
			found = strings.Contains(e.Damaged, "attestation.json") && e.Run == r.Run
		}
	}
	if !found {
		t.Errorf("runs --json does not list the run with an unreadable attestation as damaged:\n%s", out)
	}
	_, errOut, code = sandbox(t, home, "show", r.Run)
	if code != 4 || !strings.Contains(errOut, "is damaged: attestation.json") {
		t.Errorf("show, attestation unreadable: %d %s", code, errOut)
	}
	_, errOut, code = sandbox(t, home, "replay", r.Run)
	if code != 4 || !strings.Contains(errOut, "is damaged: attestation.json") {
		t.Errorf("replay, attestation unreadable: %d %s", code, errOut)
	}
}

// TestCompletion: the shell completes run ids (with "last") where a
// command takes a run, grant kinds after --grant and tiers after --tier.
func TestCompletion(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	hello := guestPath(t, "hello")
	_, errOut, code := sandbox(t, home, "run", "--json", "--", hello)
	var r runJSON
	if err := json.Unmarshal([]byte(lastLine(errOut)), &r); err != nil || code != 0 {
		t.Fatal(err, errOut)
	}
	id := strings.TrimPrefix(r.Run, "b3:")[:12]
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "show", ""}, []string{"last\t", id + "\texited " + filepath.Base(hello)}},
		{[]string{"__complete", "replay", id[:6]}, []string{id + "\t"}},
		{[]string{"__complete", "verify", ""}, []string{id + "\t"}},
		{[]string{"__complete", "run", "--grant", ""}, []string{"fs:\t", "net:\t", "kv:\t", "cpu:\t", "gpu:\t", "clock\t", "exec:allow:\t"}},
		{[]string{"__complete", "run", "--tier", ""}, []string{"S1\tCapability", "S2\tSandbox"}},
		{[]string{"__complete", "completion", ""}, []string{"bash", "zsh"}},
	} {
		out, _, code := sandbox(t, home, tc.args...)
		for _, w := range tc.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("%q: %d, no %q in\n%s", tc.args, code, w, out)
			}
		}
	}
}
