package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/host"
)

// TestStubsAreTheEngineCommands: the thin program lists every command
// sandbox-engine has, in the same group and order, each stub with its
// full command's name, usage line and summary; every command is in a
// group; and `sandbox --help` reads the same in both programs.
func TestStubsAreTheEngineCommands(t *testing.T) {
	thin := cli.Root(&cli.Globals{}, nil)
	full := cli.Root(&cli.Globals{}, New())
	type entry struct{ name, use, short, group string }
	list := func(root *cobra.Command) []entry {
		var out []entry
		for _, c := range root.Commands() {
			out = append(out, entry{c.Name(), c.Use, c.Short, c.GroupID})
		}
		return out
	}
	a, b := list(thin), list(full)
	if len(a) != len(b) {
		t.Fatalf("the thin program has %d commands, sandbox-engine %d:\n%v\n%v", len(a), len(b), a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("command %d: thin %+v, sandbox-engine %+v", i, a[i], b[i])
		}
		if a[i].group == "" {
			t.Errorf("%s is in no group", a[i].name)
		}
	}
	help := func(root *cobra.Command) string {
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"--help"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	h := help(thin)
	if h != help(full) {
		t.Errorf("sandbox --help differs between the programs")
	}
	// Grouped, in the order of the groups, each command under its own.
	last := -1
	for _, title := range []string{"Sealed runs:", "Live sandboxes", "Durable run records:", "Images and environments:", "Fleets:", "Grants, keys, policies and verification:", "The service:", "This machine and this program:"} {
		i := strings.Index(h, "\n"+title)
		if i < last {
			t.Errorf("group %q is not where it belongs in:\n%s", title, h)
		}
		last = i
	}
	for _, w := range []string{"Sealed runs:\n  run ", "Live sandboxes (in a running service, 'sandbox serve'):\n  create ", "The service:\n  serve ", "  version ", "  completion "} {
		if !strings.Contains(h, w) {
			t.Errorf("no %q in:\n%s", w, h)
		}
	}
}

// TestConstantsAreTheEngines: what the thin program says of runs (their
// exit statuses, whose they are, the default CPU grants in run --help)
// is what the engine does.
func TestConstantsAreTheEngines(t *testing.T) {
	for _, c := range []struct {
		name       string
		thin, host any
	}{
		{"ExitLimit", cli.ExitLimit, host.ExitLimit},
		{"ExitFailed", cli.ExitFailed, host.ExitFailed},
		{"ExitCannotExec", cli.ExitCannotExec, host.ExitCannotExec},
		{"ExitNotFound", cli.ExitNotFound, host.ExitNotFound},
		{"ExitSignalBase", cli.ExitSignalBase, host.ExitSignalBase},
		{"FromGuest", cli.FromGuest, host.FromGuest},
		{"FromSandbox", cli.FromSandbox, host.FromSandbox},
		{"DefaultCPU", cli.DefaultCPU, host.DefaultCPU},
		{"DefaultNativeCPU", cli.DefaultNativeCPU, host.DefaultNativeCPU},
	} {
		if c.thin != c.host {
			t.Errorf("%s: the thin program says %v, the engine %v", c.name, c.thin, c.host)
		}
	}
}

// TestEngineRunsStubsInProcess: in sandbox-engine a stub's command runs
// here (it never executes sandbox-engine again); in the thin program,
// with no sandbox-engine beside it, it says how to build one.
func TestEngineRunsStubsInProcess(t *testing.T) {
	home := t.TempDir()
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), []string{"--home", home, "policy", "default"}, &out, &errOut, New()); code != 0 || !strings.Contains(out.String(), "sandbox.policy/1") {
		t.Fatalf("policy default in sandbox-engine: %d %s %s", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code := cli.Run(context.Background(), []string{"--home", home, "policy", "default"}, &out, &errOut, nil)
	if code != 7 || !strings.Contains(errOut.String(), "runs in sandbox-engine") || !strings.Contains(errOut.String(), "go build -o") {
		t.Fatalf("policy default in the thin program with no sandbox-engine: %d %s", code, errOut.String())
	}
}
