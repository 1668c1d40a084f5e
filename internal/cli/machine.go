package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// This machine and this program: what sandbox is and which programs it
// uses (version, here), which tiers this machine can give and what
// ended sandbox processes left behind (doctor, gc: sandbox-engine's).

var machineCommands = []command{
	{use: "doctor", short: "Probe every tier of the ladder on this host and say which are available and why"},
	{use: "gc", short: "Remove what killed or crashed sandbox processes left behind, and say what"},
	{use: "version", make: versionCmd},
}

// VersionJSON is what `sandbox version --json` prints.
type VersionJSON struct {
	Schema    int    `json:"schema"`
	Version   string `json:"version"`            // the module's version, "(devel)" for a source build
	Commit    string `json:"commit,omitempty"`   // the VCS revision built from
	Time      string `json:"time,omitempty"`     // of that revision
	Modified  bool   `json:"modified,omitempty"` // built from a tree with changes
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	S1Helper  string `json:"s1_helper"`
	HelperHow string `json:"s1_helper_found"`
	// Engine is sandbox-engine, the program the commands that run the
	// engine in-process run in; "" when there is none beside sandbox.
	Engine string `json:"engine"`
}

// ModuleVersion is the module's version: "(devel)" for a source build.
func ModuleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return "(unknown)"
}

func (g *Globals) versionOf() VersionJSON {
	v := VersionJSON{Schema: JSONSchema, Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		v.HelperHow = "none: " + err.Error()
		return v
	}
	switch p := filepath.Join(filepath.Dir(self), EngineName); {
	case g.engine != nil:
		v.Engine = self // this program
	case isExecutable(p):
		v.Engine = p
	}
	// Where S1 runs in this process (sandbox-engine's), they start
	// sandbox-s1 beside it as their init, else sandbox-engine itself
	// (internal/native's HelperPath).
	switch p := filepath.Join(filepath.Dir(self), "sandbox-s1"); {
	case isExecutable(p):
		v.S1Helper, v.HelperHow = p, "sandbox-s1 beside sandbox"
	case v.Engine != "":
		v.S1Helper, v.HelperHow = v.Engine, EngineName+" itself (no sandbox-s1 beside it: S1 runs start "+EngineName+"'s own binary as their init)"
	default:
		v.HelperHow = "none: neither sandbox-s1 nor " + EngineName + " is beside sandbox"
	}
	return v
}

func versionCmd(g *Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print sandbox's version, the commit it was built from, and the S1 helper and engine it uses",
		Args:  UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := g.versionOf()
			if asJSON {
				return PrintJSON(cmd.OutOrStdout(), v)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "sandbox %s", v.Version)
			if v.Commit != "" {
				fmt.Fprintf(w, " (commit %s", v.Commit)
				if v.Modified {
					fmt.Fprint(w, ", with changes")
				}
				if v.Time != "" {
					fmt.Fprintf(w, ", %s", v.Time)
				}
				fmt.Fprint(w, ")")
			}
			fmt.Fprintf(w, "\n%s %s\nS1 helper: %s (%s)\n", v.Go, v.Platform, v.S1Helper, v.HelperHow)
			if v.Engine != "" {
				fmt.Fprintf(w, "engine: %s\n", v.Engine)
			} else {
				fmt.Fprintf(w, "engine: none (%s is not beside sandbox: build it there with 'go build -o DIR/%s ./cmd/%s')\n", EngineName, EngineName, EngineName)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs/cli-json.md)")
	return c
}
