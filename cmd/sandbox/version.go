package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/native"
)

// versionJSON is what `sandbox version --json` prints.
type versionJSON struct {
	Schema    int    `json:"schema"`
	Version   string `json:"version"`            // the module's version, "(devel)" for a source build
	Commit    string `json:"commit,omitempty"`   // the VCS revision built from
	Time      string `json:"time,omitempty"`     // of that revision
	Modified  bool   `json:"modified,omitempty"` // built from a tree with changes
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	S1Helper  string `json:"s1_helper"`
	HelperHow string `json:"s1_helper_found"`
}

func versionOf() versionJSON {
	v := versionJSON{Schema: jsonSchema, Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
	v.S1Helper, v.HelperHow = native.HelperPath()
	return v
}

func versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print sandbox's version, the commit it was built from, and the S1 helper it uses",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionOf()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
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
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs/cli-json.md)")
	return c
}
