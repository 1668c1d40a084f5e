package native

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/job"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

func TestMain(m *testing.M) {
	if code, ok := Helper(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

var testExec *Executor

func executor(t *testing.T) *Executor {
	t.Helper()
	if testExec == nil {
		e, err := New(Config{StateDir: t.TempDir(), Memory: 256 << 20, Pids: 64})
		if err != nil {
			t.Fatal(err)
		}
		testExec = e
	}
	return testExec
}

type result struct {
	res            *job.Result
	err            error
	stdout, stderr string
}

func runNative(t *testing.T, grants []string, deadline time.Duration, args ...string) result {
	t.Helper()
	g, err := grant.ParseArgs(append([]string{"cpu:10J"}, grants...), "/")
	if err != nil {
		t.Fatal(err)
	}
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte(args[0])), Entry: args[0], Args: args,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}}
	var out, errb bytes.Buffer
	res, err := executor(t).Run(context.Background(), &job.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: deadline})
	return result{res, err, out.String(), errb.String()}
}

func TestTrue(t *testing.T) {
	r := runNative(t, nil, time.Minute, "/bin/true")
	if r.err != nil || r.res.Outcome.Status != attest.Exited || *r.res.Outcome.ExitCode != 0 {
		t.Fatalf("%v %+v %s", r.err, r.res, r.stderr)
	}
}

func TestShell(t *testing.T) {
	r := runNative(t, nil, time.Minute, "/bin/sh", "-c", "echo hello; id; hostname; exit 3")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "hello\nuid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\nsandbox\n" || *r.res.Outcome.ExitCode != 3 {
		t.Fatalf("stdout %q stderr %q outcome %+v exit %d", r.stdout, r.stderr, r.res.Outcome, *r.res.Outcome.ExitCode)
	}
}

func TestProbe(t *testing.T) {
	p := executor(t).Probe(context.Background())
	for _, l := range p.Layers {
		t.Logf("%s %v %s", l.Name, l.OK, l.Detail)
	}
	if !p.Available {
		t.Fatalf("S1 probe: %s", p.Reason)
	}
}
