package proof

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// logKey is a fixed host key, so crash children sign with the same.
func logKey(t testing.TB, seed byte) key.Private {
	t.Helper()
	k, err := key.FromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pae is DSSE's pre-authentication encoding.
func pae(typ string, payload []byte) []byte {
	return []byte(fmt.Sprintf("DSSEv1 %d %s %d %s", len(typ), typ, len(payload), payload))
}

const inToto = "application/vnd.in-toto+json"

// envelope is a cell in a DSSE envelope signed by k: the tiny helper
// the log's tests need (the real signer is the proof run's).
func envelope(t testing.TB, k key.Private, c Cell) []byte {
	t.Helper()
	st, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"name": "sandbox-engine", "digest": map[string]string{"sha256": fmt.Sprintf("%x", sha256.Sum256([]byte(c.Started)))}}},
		"predicateType": PredicateType,
		"predicate":     c,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"payloadType": inToto,
		"payload":     base64.StdEncoding.EncodeToString(st),
		"signatures":  []map[string]string{{"keyid": k.Public().String(), "sig": base64.StdEncoding.EncodeToString(k.Sign(pae(inToto, st)))}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// verifying is an Opener that checks the envelope's signature under pub
// before it reads the predicate: what the real one does.
func verifying(pub key.Public) Opener {
	return func(b []byte) (*Cell, error) {
		var env struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
			Signatures  []struct {
				Sig string `json:"sig"`
			} `json:"signatures"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			return nil, reject.New(reject.Malformed, "envelope", "%v", err)
		}
		st, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil || len(env.Signatures) == 0 {
			return nil, reject.New(reject.Malformed, "envelope", "no payload or no signature")
		}
		sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
		if !pub.Verify(pae(env.PayloadType, st), sig) {
			return nil, reject.New(reject.Signature, "envelope", "the signature does not verify")
		}
		return PeekCell(b)
	}
}

// cellOf is a cell of target n (of targets "a" and "b"…), numbered i.
func cellOf(target string, i int, states ...State) Cell {
	c := Cell{
		Substrate: Substrate{Version: "0.9." + strconv.Itoa(i), Binary: "b3:00"},
		Target:    Target{OS: "linux", Kernel: "6.1." + target, Arch: "amd64", CPU: "cpu " + target, Virtualisation: "kvm guest", Cgroup: "v2", VM: "kvm"},
		Started:   fmt.Sprintf("2026-01-01T00:%02d:00Z", i),
		Ended:     fmt.Sprintf("2026-01-01T00:%02d:30Z", i),
	}
	for t := range tier.All {
		s := Green
		if t < len(states) {
			s = states[t]
		}
		tr := TierResult{Tier: tier.Tier(t), State: s}
		switch s {
		case Green:
			tr.Run, tr.Executor = fmt.Sprintf("b3:%02d%02d", i, t), "exec"
		case Red:
			tr.Error, tr.Executor = fmt.Sprintf("cell %d: it failed", i), "exec"
		case Unavailable:
			tr.Reason = "no such hardware here"
		}
		c.Tiers = append(c.Tiers, tr)
	}
	return c
}

func verifiersOf(t testing.TB, ks ...key.Private) []note.Verifier {
	var vs []note.Verifier
	for _, k := range ks {
		s, err := note.VerifierKey(KeyName(k.Public()), k.Public())
		if err != nil {
			t.Fatal(err)
		}
		v, err := note.ParseVerifierKey(s)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

// logOf appends n cells to a new log and returns its path, the cells'
// envelopes and the checkpoint after each.
func logOf(t *testing.T, k key.Private, n int) (string, [][]byte, []Checked) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proof.log")
	var envs [][]byte
	var cps []Checked
	for i := range n {
		e := envelope(t, k, cellOf(string(rune('a'+i%3)), i, Green, Green, Red, Unavailable))
		idx, cp, err := Append(path, DefaultOrigin, e, verifying(k.Public()), k)
		if err != nil || idx != i {
			t.Fatalf("append %d: %d, %v", i, idx, err)
		}
		c, err := OpenCheckpoint([]byte(cp), DefaultOrigin, verifiersOf(t, k))
		if err != nil || c.Size != uint64(i+1) {
			t.Fatalf("checkpoint %d: %+v %v", i, c, err)
		}
		envs, cps = append(envs, e), append(cps, c)
	}
	return path, envs, cps
}

func TestLogAppendReplayVerify(t *testing.T) {
	k := logKey(t, 1)
	path, envs, cps := logOf(t, k, 7)
	l, err := ReadLog(path, DefaultOrigin, verifying(k.Public()))
	if err != nil || l.Size() != 7 {
		t.Fatal(l, err)
	}
	for i, e := range envs {
		if !bytes.Equal(l.Entries[i], e) {
			t.Fatalf("entry %d is not the cell's bytes as given", i)
		}
	}
	// The checkpoint beside the log is the last one.
	cp, err := os.ReadFile(CheckpointPath(path))
	if err != nil || string(cp) != cps[6].Signed {
		t.Fatalf("%s: %v", cp, err)
	}
	b, _ := os.ReadFile(path)
	if _, err := VerifyLog(b, DefaultOrigin, verifying(k.Public()), cps); err != nil {
		t.Fatal(err)
	}
	// A cell already logged is refused; so is one that does not open.
	if _, _, err := Append(path, DefaultOrigin, envs[2], verifying(k.Public()), k); !errors.Is(err, reject.Invalid) {
		t.Fatalf("a cell twice: %v", err)
	}
	other := logKey(t, 2)
	if _, _, err := Append(path, DefaultOrigin, envelope(t, other, cellOf("z", 1)), verifying(k.Public()), k); !errors.Is(err, reject.Signature) {
		t.Fatalf("a cell by another key: %v", err)
	}
	// An envelope over several lines is logged compacted.
	var pretty bytes.Buffer
	e := envelope(t, k, cellOf("p", 40))
	json.Indent(&pretty, e, "", "  ")
	if _, _, err := Append(path, DefaultOrigin, pretty.Bytes(), verifying(k.Public()), k); err != nil {
		t.Fatal(err)
	}
	if l, _ := ReadLog(path, DefaultOrigin, verifying(k.Public())); !bytes.Equal(l.Entries[7], e) {
		t.Fatalf("a pretty envelope logged as %s", l.Entries[7])
	}
}

func TestLogTornTail(t *testing.T) {
	k := logKey(t, 1)
	path, _, cps := logOf(t, k, 3)
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"payloadType":"appl`)
	f.Close()
	// A reader leaves the fragment out; a verifier of a log at rest refuses it.
	l, err := ReadLog(path, DefaultOrigin, verifying(k.Public()))
	if err != nil || l.Size() != 3 {
		t.Fatal(l, err)
	}
	b, _ := os.ReadFile(path)
	if _, err := VerifyLog(b, DefaultOrigin, verifying(k.Public()), cps); !errors.Is(err, reject.Truncated) {
		t.Fatalf("torn: %v", err)
	}
	// The next append cuts it, and the log extends every checkpoint.
	if i, _, err := Append(path, DefaultOrigin, envelope(t, k, cellOf("a", 9)), verifying(k.Public()), k); err != nil || i != 3 {
		t.Fatal(i, err)
	}
	b, _ = os.ReadFile(path)
	if _, err := VerifyLog(b, DefaultOrigin, verifying(k.Public()), cps); err != nil {
		t.Fatal(err)
	}
	// A line that is not an envelope is fatal, never a shorter history.
	os.WriteFile(path, append(b, "not json\n"...), 0o600)
	if _, err := ReadLog(path, DefaultOrigin, verifying(k.Public())); !errors.Is(err, reject.Malformed) || !strings.Contains(err.Error(), "entry 4") {
		t.Fatalf("garbage: %v", err)
	}
	if _, _, err := Append(path, DefaultOrigin, envelope(t, k, cellOf("a", 10)), verifying(k.Public()), k); !errors.Is(err, reject.Malformed) {
		t.Fatalf("append after garbage: %v", err)
	}
}

// TestLogCrashMidAppend kills the writer at each point of an append (its
// line written, then fsynced, before the checkpoint is signed): the log
// replays, holds every acknowledged entry, and extends every checkpoint
// signed before the crash.
func TestLogCrashMidAppend(t *testing.T) {
	if p := os.Getenv("PROOF_LOG_CHILD"); p != "" {
		k := logKey(t, 1)
		_, _, err := Append(p, DefaultOrigin, envelope(t, k, cellOf("c", 99)), verifying(k.Public()), k)
		t.Fatalf("the child was not killed: %v", err)
	}
	for _, point := range crash.LogPoints {
		t.Run(point, func(t *testing.T) {
			k := logKey(t, 1)
			path, _, cps := logOf(t, k, 3)
			cmd := exec.Command(os.Args[0], "-test.run", "^TestLogCrashMidAppend$")
			cmd.Env = append(os.Environ(), "PROOF_LOG_CHILD="+path, crash.Env+"="+point)
			out, err := cmd.CombinedOutput()
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != -1 {
				t.Fatalf("the child was not killed: %v\n%s", err, out)
			}
			b, _ := os.ReadFile(path)
			l, err := VerifyLog(b, DefaultOrigin, verifying(k.Public()), cps)
			if err != nil || l.Size() < 3 {
				t.Fatal(err)
			}
			// The checkpoint beside the log is still the last acknowledged one.
			cp, _ := os.ReadFile(CheckpointPath(path))
			if string(cp) != cps[2].Signed {
				t.Fatalf("a checkpoint signed before its entry was acknowledged:\n%s", cp)
			}
			// A torn fragment (the write cut short) replays as the prefix.
			os.WriteFile(path, b[:len(b)-10], 0o600)
			if l, err := ReadLog(path, DefaultOrigin, verifying(k.Public())); err != nil || l.Size() != 3 || l.Root(3) != cps[2].Root {
				t.Fatal(err)
			}
			if _, _, err := Append(path, DefaultOrigin, envelope(t, k, cellOf("c", 98)), verifying(k.Public()), k); err != nil {
				t.Fatal(err)
			}
			b, _ = os.ReadFile(path)
			if _, err := VerifyLog(b, DefaultOrigin, verifying(k.Public()), cps); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLogTamperAgainstCheckpoints: what was removed, reordered or
// edited after a checkpoint was signed is caught by that checkpoint,
// even when the log's keeper re-signs a new one.
func TestLogTamperAgainstCheckpoints(t *testing.T) {
	k := logKey(t, 1)
	path, envs, cps := logOf(t, k, 6)
	open := verifying(k.Public())
	lines := func(es ...[]byte) []byte { return append(bytes.Join(es, []byte("\n")), '\n') }
	// An edit by someone without the key: the red cell made green.
	var env map[string]any
	json.Unmarshal(envs[2], &env)
	st, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
	env["payload"] = base64.StdEncoding.EncodeToString(bytes.ReplaceAll(st, []byte(`"red"`), []byte(`"green"`)))
	edited, _ := json.Marshal(env)
	// An edit by the keeper: the red cell re-signed green.
	resigned := envelope(t, k, cellOf("c", 2))
	for _, tc := range []struct {
		name string
		log  []byte
		code reject.Code
	}{
		{"removed", lines(envs[0], envs[1], envs[3], envs[4], envs[5]), reject.ProofLogInconsistent},
		{"removed last", lines(envs[:5]...), reject.ProofLogInconsistent},
		{"reordered", lines(envs[0], envs[2], envs[1], envs[3], envs[4], envs[5]), reject.ProofLogInconsistent},
		{"edited", lines(envs[0], envs[1], edited, envs[3], envs[4], envs[5]), reject.ProofLogEdited},
		{"re-signed", lines(envs[0], envs[1], resigned, envs[3], envs[4], envs[5]), reject.ProofLogInconsistent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyLog(tc.log, DefaultOrigin, open, cps)
			if !errors.Is(err, tc.code) {
				t.Fatalf("%v, want %s", err, tc.code)
			}
			// The keeper re-signs the tampered log: its own new
			// checkpoint holds, the old ones others hold do not.
			if tc.code == reject.ProofLogEdited {
				return
			}
			l, _, err := ParseLog(tc.log, DefaultOrigin, open)
			if err != nil {
				t.Fatal(err)
			}
			cp, _ := l.Checkpoint(l.Size(), k)
			c, err := OpenCheckpoint([]byte(cp), DefaultOrigin, verifiersOf(t, k))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyLog(tc.log, DefaultOrigin, open, []Checked{c}); err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyLog(tc.log, DefaultOrigin, open, []Checked{cps[len(cps)-1], c}); !errors.Is(err, reject.ProofLogInconsistent) {
				t.Fatalf("an old checkpoint against the re-signed log: %v", err)
			}
		})
	}
	b, _ := os.ReadFile(path)
	if _, err := VerifyLog(b, "another/log", open, cps); !errors.Is(err, reject.Splice) {
		t.Fatalf("another origin: %v", err)
	}
}

func TestCheckpointForged(t *testing.T) {
	k := logKey(t, 1)
	_, _, cps := logOf(t, k, 3)
	vs := verifiersOf(t, k)
	good := cps[2].Signed
	text, sigs, _ := strings.Cut(good, "\n\n")
	// Another root under the real signature: forged.
	root := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	lines := strings.Split(text, "\n")
	forgedRoot := strings.Join([]string{lines[0], lines[1], root}, "\n") + "\n\n" + sigs
	// A signature's bytes flipped: forged.
	i := strings.LastIndex(good, " ") + 20
	flipped := good[:i] + string(good[i]^1) + good[i+1:]
	// Signed by another key under this key's name and id: forged.
	other := logKey(t, 2)
	otherSigned, _ := note.Sign(text+"\n", KeyName(other.Public()), other)
	for _, tc := range []struct {
		name string
		cp   string
		code reject.Code
	}{
		{"another root", forgedRoot, reject.ProofLogForged},
		{"flipped", flipped, reject.ProofLogForged},
		{"another key", otherSigned, reject.UntrustedKey},
		{"no signature", text + "\n", reject.Malformed},
	} {
		if _, err := OpenCheckpoint([]byte(tc.cp), DefaultOrigin, vs); !errors.Is(err, tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if _, err := OpenCheckpoint([]byte(good), DefaultOrigin, vs); err != nil {
		t.Fatal(err)
	}
}

func TestLogInclusionAndConsistencyProofs(t *testing.T) {
	k := logKey(t, 1)
	path, envs, cps := logOf(t, k, 11)
	vs := verifiersOf(t, k)
	l, err := ReadLog(path, DefaultOrigin, verifying(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= l.Size(); n++ {
		for i := range n {
			p, err := l.Prove(i, n, cps[n-1].Signed)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(p)
			p2, err := ParseInclusion(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyInclusion(p2, envs[i], DefaultOrigin, vs); err != nil {
				t.Fatalf("entry %d of %d: %v", i, n, err)
			}
		}
	}
	p, _ := l.Prove(4, 11, cps[10].Signed)
	// Another cell's bytes: edited.
	if _, err := VerifyInclusion(p, envs[5], DefaultOrigin, vs); !errors.Is(err, reject.ProofLogEdited) {
		t.Fatalf("another cell: %v", err)
	}
	// A tampered path, index or size does not verify.
	bad := p
	bad.Path = append([]Node{}, p.Path...)
	bad.Path[1][0] ^= 1
	if _, err := VerifyInclusion(bad, envs[4], DefaultOrigin, vs); !errors.Is(err, reject.Invalid) {
		t.Fatalf("tampered path: %v", err)
	}
	bad = p
	bad.Index = 5
	if _, err := VerifyInclusion(bad, nil, DefaultOrigin, vs); !errors.Is(err, reject.Invalid) {
		t.Fatalf("another index: %v", err)
	}
	bad = p
	bad.Size = 10
	if _, err := VerifyInclusion(bad, nil, DefaultOrigin, vs); !errors.Is(err, reject.Invalid) {
		t.Fatalf("another size: %v", err)
	}
	for m := 1; m <= 11; m++ {
		for n := m; n <= 11; n++ {
			c, err := l.ProveConsistency(cps[m-1].Signed, cps[n-1].Signed, m, n)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(c)
			c2, err := ParseConsistency(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := CheckConsistency(c2, DefaultOrigin, vs); err != nil {
				t.Fatalf("%d to %d: %v", m, n, err)
			}
			if len(c.Proof) > 0 {
				c.Proof[0][3] ^= 1
				if _, _, err := CheckConsistency(c, DefaultOrigin, vs); !errors.Is(err, reject.ProofLogInconsistent) {
					t.Fatalf("%d to %d tampered: %v", m, n, err)
				}
			}
		}
	}
	// The new and old swapped: entries removed.
	c, _ := l.ProveConsistency(cps[3].Signed, cps[8].Signed, 4, 9)
	c.Old, c.New = c.New, c.Old
	if _, _, err := CheckConsistency(c, DefaultOrigin, vs); !errors.Is(err, reject.ProofLogInconsistent) {
		t.Fatalf("swapped: %v", err)
	}
	if _, err := ParseInclusion([]byte(`{"index":0,"size":1,"leaf":"AA==","path":[],"checkpoint":""}`)); !errors.Is(err, reject.Malformed) {
		t.Fatalf("short leaf: %v", err)
	}
	if _, err := ParseInclusion([]byte(`{"index":0,"size":1,"path":[],"checkpoint":""}`)); !errors.Is(err, reject.MissingField) {
		t.Fatalf("no leaf: %v", err)
	}
	if _, err := ParseConsistency([]byte(`{"old_checkpoint":"","new_checkpoint":"","proof":[],"x":1}`)); !errors.Is(err, reject.Invalid) {
		t.Fatalf("unknown field: %v", err)
	}
}

func FuzzOpenLog(f *testing.F) {
	k := logKey(f, 1)
	e1, e2 := envelope(f, k, cellOf("a", 1)), envelope(f, k, cellOf("b", 2, Red))
	f.Add(append(append(append(e1, '\n'), e2...), '\n'))
	f.Add(append(e1, '\n'))
	f.Add([]byte("{}\n{\n"))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{}]}` + "\n"))
	vs := verifiersOf(f, k)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, open := range []Opener{PeekCell, verifying(k.Public())} {
			l, torn, err := ParseLog(b, DefaultOrigin, open)
			if err != nil {
				if reject.CodeOf(err) == "" {
					t.Fatalf("an error with no code: %v", err)
				}
				continue
			}
			if torn < 0 || torn > len(b) || l.Size() != len(l.Cells) {
				t.Fatal(torn, l.Size())
			}
			m := NewMatrix(l)
			var w bytes.Buffer
			if err := m.HTML(&w); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(strings.ToLower(w.String()), "<script") {
				t.Fatal("a script in the page")
			}
			m.Text(&w)
			m.Markdown(&w)
		}
		// The same bytes as a checkpoint, an inclusion and a consistency proof.
		OpenCheckpoint(b, DefaultOrigin, vs)
		if p, err := ParseInclusion(b); err == nil {
			VerifyInclusion(p, b, DefaultOrigin, vs)
		}
		if c, err := ParseConsistency(b); err == nil {
			CheckConsistency(c, DefaultOrigin, vs)
		}
	})
}
