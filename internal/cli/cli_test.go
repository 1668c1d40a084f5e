package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestOneCommandAsInTheTree: a command the thin program runs in a tree
// of its own prints, and exits, as it does in the whole tree: its help,
// its flags' and arguments' errors, its subcommands', its refusals with
// no service to call; with --home as cobra takes it, before the command
// and after.
func TestOneCommandAsInTheTree(t *testing.T) {
	if p, err := enginePath(); err == nil {
		t.Skipf("a sandbox-engine beside the test binary (%s): its stubs would execute it", p)
	}
	home := t.TempDir()
	n := 0
	for _, grp := range groups {
		for _, c := range commandsOf(grp.ID) {
			if got := tree(&Globals{}, nil, c.name()).Commands(); len(got) != 1 || got[0].Name() != c.name() {
				t.Fatalf("the tree of %s alone has %d commands", c.name(), len(got))
			}
			for _, rest := range [][]string{nil, {"--help"}, {"-h"}, {"--bogus"}, {"bogus"}, {"bogus", "--help"}, {"--json", "bogus"}, {"--home", home, "-h"}} {
				for _, before := range [][]string{{"--home", home}, {"--home=" + home}} {
					args := append(append(slices.Clone(before), c.name()), rest...)
					if got := invoked(args); got != c.name() {
						t.Fatalf("invoked(%q) = %q, want %q", args, got, c.name())
					}
					var o1, e1, o2, e2 bytes.Buffer
					one := run(context.Background(), args, &o1, &e1, nil, false)
					whole := run(context.Background(), args, &o2, &e2, nil, true)
					if one != whole || o1.String() != o2.String() || e1.String() != e2.String() {
						t.Errorf("%q: alone exit %d\n%s%s\nin the tree exit %d\n%s%s", args, one, o1.String(), e1.String(), whole, o2.String(), e2.String())
					}
					n++
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("only %d command lines compared", n)
	}
}

// TestCommandNames: each command is listed by the name cobra gives it,
// in one group.
func TestCommandNames(t *testing.T) {
	seen := map[string]string{}
	for _, grp := range groups {
		for _, c := range commandsOf(grp.ID) {
			if got := c.build(&Globals{}).Name(); got != c.name() {
				t.Errorf("%s: %q is listed as %q", grp.ID, got, c.name())
			}
			if g, ok := seen[c.name()]; ok {
				t.Errorf("%s is in %s and %s", c.name(), g, grp.ID)
			}
			seen[c.name()] = grp.ID
		}
	}
}

// TestInvoked: the whole tree (no name) for what only it can run or
// find: help, completion, no command, a name that is none, a flag
// before the command.
func TestInvoked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"version"}, "version"},
		{[]string{"run", "--", "/bin/true"}, "run"},
		{[]string{"--home", "h", "ps"}, "ps"},
		{[]string{"--home", "--help", "ps"}, "ps"}, // --help is --home's value
		{[]string{"--home=h", "doctor", "--json"}, "doctor"},
		{nil, ""},
		{[]string{"--home", "h"}, ""},
		{[]string{"--home"}, ""},
		{[]string{"help", "run"}, ""},
		{[]string{"completion", "bash"}, ""},
		{[]string{"__complete", "run", ""}, ""},
		{[]string{"--help"}, ""},
		{[]string{"-h", "run"}, ""},
		{[]string{"--bogus", "run"}, ""},
		{[]string{"--", "run"}, ""},
		{[]string{"rn"}, ""},
		{[]string{"Run"}, ""},
	} {
		if got := invoked(tc.args); got != tc.want {
			t.Errorf("invoked(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestHashStopsAtInterrupt: `sandbox hash` of a file ends when its
// context does (Ctrl-C: the cause a signal gives it), with the
// interrupt's exit status and no address printed; it had hashed to the
// end whatever the signal said.
func TestHashStopsAtInterrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(Interrupted{syscall.SIGINT})
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"hash", p, p}, &out, &errb, nil); code != 130 || out.Len() != 0 {
		t.Fatalf("hash after Ctrl-C: exit %d, printed %q, said %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Run(context.Background(), []string{"hash", p}, &out, &errb, nil); code != 0 || !strings.HasPrefix(out.String(), "b3:") {
		t.Fatalf("hash: exit %d %q %q", code, out.String(), errb.String())
	}
}
