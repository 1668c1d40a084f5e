package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/tier"
)

// Shell completion ('sandbox completion bash|zsh|fish|powershell' writes
// the script): run ids where a command takes a run, grant kinds after
// --grant, tiers after --tier.

// completeRuns completes a run argument: "last", and the ids of the
// stored runs (12 digits, with the outcome and program as a hint).
func completeRuns(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		out := []string{"last\tthe newest run"}
		d, err := g.stateDir()
		if err != nil {
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		runs, _ := live.Light(d).Runs()
		for _, r := range runs {
			id := r.ID.Hex()
			if id == "" {
				continue
			}
			hint := string(r.Status) + " " + r.Entry
			if r.Damaged != "" {
				hint = "DAMAGED"
			}
			if strings.HasPrefix(id, strings.TrimPrefix(toComplete, "b3:")) {
				out = append(out, id[:12]+"\t"+strings.TrimSpace(hint))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// grantKinds are the completions of --grant: each kind with what follows.
func grantKinds() []string {
	out := []string{
		"fs:\tfs:PATH:ro|rw[:quota=SIZE], a directory",
		"net:\tnet:HOST:PORT",
		"kv:\tkv:NAMESPACE:ro|rw",
		"clock\tthe real clock",
		"random\treal randomness",
		"exec:allow:\texec:allow:b3:HEX, a program the run may execute",
		"exec:deny:\texec:deny:b3:HEX, a program the run may not execute",
		"kernel\ta kernel of its own (S5)",
		"confidential\tconfidential computing (S6, S7)",
		"locality:\tlocality:NAME",
	}
	for _, c := range device.Classes {
		n := strings.ToLower(string(c))
		out = append(out, n+":\t"+n+":ENERGY, e.g. "+n+":5J, a budget for "+string(c))
	}
	return out
}

func completeGrants(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return grantKinds(), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

func completeTiers(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, t := range tier.All {
		out = append(out, t.String()+"\t"+t.Name())
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
