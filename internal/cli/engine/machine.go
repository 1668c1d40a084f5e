package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/meter/powercap"
	"github.com/opensubstrate/sandbox/tier"
)

// This machine: which tiers it can give and why (doctor), and what
// ended sandbox processes left behind (gc).

func doctorCmd(g *cli.Globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Probe every tier of the ladder on this host and say which are available and why",
		Long: `Probe every tier of the ladder on this host (each probe runs a real,
confined check) and say which are available and why; list what ended
sandbox processes left behind (sandbox gc removes it); the energy
sources and what each can measure; whether S1 can log the kernel's
denials; how runs are attributed (cgroups).`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := hostOf(g)
			if err != nil {
				return err
			}
			h.Reprobe = true // doctor always probes, and refreshes what is kept
			d := doctorOf(cmd.Context(), h)
			if asJSON {
				return cli.PrintJSON(cmd.OutOrStdout(), d)
			}
			printDoctor(cmd.OutOrStdout(), d)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs/cli-json.md)")
	return c
}

type executorJSON struct {
	Name      string `json:"name"`
	Tier      string `json:"tier"`
	Kind      string `json:"kind"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

// DoctorJSON is what doctor found; printed as text or as JSON.
type DoctorJSON struct {
	Schema int         `json:"schema"`
	Tiers  []tierProbe `json:"tiers"`
	// Executors lists every executor's probe, those a tier's first
	// available one hides included.
	Executors []executorJSON `json:"executors"`
	Leftovers []leftoverJSON `json:"leftovers"`
	// LeftoversError is why leftovers could not be looked for.
	LeftoversError string       `json:"leftovers_error,omitempty"`
	Energy         []sourceJSON `json:"energy"`
	EnergyNotes    []string     `json:"energy_notes,omitempty"`
	TDP            []tdpJSON    `json:"tdp,omitempty"`
	KernelDenials  denialsJSON  `json:"kernel_denials"`
	Cgroups        *cgroupsJSON `json:"cgroups"` // null: none (not root, or none mounted)
	// Devices is, for each executor that can give devices besides the
	// CPU, whether it can give a GPU here, and why not.
	Devices []deviceJSON `json:"devices"`
}

type deviceJSON struct {
	Executor  string `json:"executor"`
	Class     string `json:"class"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
}

type tierProbe struct {
	Tier      string      `json:"tier"`
	Name      string      `json:"name"`
	Available bool        `json:"available"`
	Reason    string      `json:"reason"`
	Layers    []layerJSON `json:"layers,omitempty"`
}

type layerJSON struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type leftoverJSON struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Unowned bool   `json:"unowned,omitempty"`
}

type sourceJSON struct {
	Source string `json:"source"`
	Class  string `json:"class"`
	State  string `json:"state"`
	Detail string `json:"detail"`
}

type tdpJSON struct {
	Class      string `json:"class"`
	MilliWatts int64  `json:"milliwatts"`
	Origin     string `json:"origin"`
}

type denialsJSON struct {
	Logged bool   `json:"logged"`
	Why    string `json:"why"`
}

type cgroupsJSON struct {
	Kind string `json:"kind"`
	Root string `json:"root"`
}

func doctorOf(ctx context.Context, h *live.Manager) DoctorJSON {
	d := DoctorJSON{Schema: cli.JSONSchema, Leftovers: []leftoverJSON{}, Energy: []sourceJSON{}, Devices: []deviceJSON{}}
	avail := h.Availability(ctx)
	for _, t := range tier.All {
		p := avail[t]
		tp := tierProbe{Tier: t.String(), Name: t.Name(), Available: p.Available, Reason: p.Reason}
		for _, l := range p.Layers {
			tp.Layers = append(tp.Layers, layerJSON{l.Name, l.OK, l.Detail})
		}
		d.Tiers = append(d.Tiers, tp)
	}
	for _, e := range h.ExecutorProbes(ctx) {
		d.Executors = append(d.Executors, executorJSON{e.Name, e.Tier.String(), string(e.Kind), e.Probe.Available, e.Probe.Reason})
	}
	ls, err := h.GC(true)
	if err != nil {
		d.LeftoversError = err.Error()
	}
	for _, l := range ls {
		d.Leftovers = append(d.Leftovers, leftoverJSON{l.Kind, l.Path, l.Unowned})
	}
	for _, st := range h.Meter.Statuses() {
		d.Energy = append(d.Energy, sourceJSON{st.Source, string(st.Class), string(st.State), st.Detail})
	}
	for _, s := range h.Meter.Sources {
		if p, ok := s.(*powercap.Source); ok {
			for _, n := range p.Notes() {
				d.EnergyNotes = append(d.EnergyNotes, p.Name()+": "+n)
			}
		}
	}
	for _, c := range device.Classes {
		if t, ok := h.Meter.TDP[c]; ok {
			d.TDP = append(d.TDP, tdpJSON{string(c), int64(t.MilliWatts), t.Origin})
		}
	}
	d.KernelDenials.Logged, d.KernelDenials.Why = builtin.KernelDenials()
	if h.Cgroups != nil {
		d.Cgroups = &cgroupsJSON{string(h.Cgroups.Kind()), h.Cgroups.Root}
	}
	for _, ex := range h.Executors {
		if p, ok := ex.(executor.DeviceProber); ok {
			gp := p.DeviceProbe(device.GPU)
			d.Devices = append(d.Devices, deviceJSON{ex.Name(), string(device.GPU), gp.Available, gp.Reason})
		}
	}
	return d
}

func printDoctor(out io.Writer, d DoctorJSON) {
	fmt.Fprintln(out, "tiers")
	for _, t := range d.Tiers {
		mark := "no "
		if t.Available {
			mark = "yes"
		}
		fmt.Fprintf(out, "  %s %-12s %s  %s\n", t.Tier, t.Name, mark, t.Reason)
		for _, l := range t.Layers {
			ok := "ok  "
			if !l.OK {
				ok = "FAIL"
			}
			fmt.Fprintf(out, "       %s %-14s %s\n", ok, l.Name, l.Detail)
		}
	}
	fmt.Fprintln(out, "executors")
	for _, e := range d.Executors {
		mark := "no "
		if e.Available {
			mark = "yes"
		}
		fmt.Fprintf(out, "  %-18s %s %-6s %s  %s\n", e.Name, e.Tier, e.Kind, mark, e.Reason)
	}
	fmt.Fprintln(out, "leftovers")
	switch {
	case d.LeftoversError != "":
		fmt.Fprintf(out, "  cannot look: %s\n", d.LeftoversError)
	case len(d.Leftovers) == 0:
		fmt.Fprintln(out, "  none: nothing of an ended sandbox process is left")
	}
	for _, l := range d.Leftovers {
		if l.Unowned {
			fmt.Fprintf(out, "  unowned  %-16s %s (no lease in its name: made before leases; remove it by hand once no older sandbox runs)\n", l.Kind, l.Path)
		} else {
			fmt.Fprintf(out, "  ended    %-16s %s ('sandbox gc' removes it)\n", l.Kind, l.Path)
		}
	}
	fmt.Fprintln(out, "energy")
	for _, st := range d.Energy {
		fmt.Fprintf(out, "  %-14s %-4s %-11s %s\n", st.Source, st.Class, st.State, st.Detail)
	}
	for _, n := range d.EnergyNotes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	for _, t := range d.TDP {
		fmt.Fprintf(out, "  estimator      %-4s TDP %.1f W (%s)\n", t.Class, float64(t.MilliWatts)/1000, t.Origin)
	}
	fmt.Fprintln(out, "kernel denials")
	if d.KernelDenials.Logged {
		fmt.Fprintf(out, "  S1 logs them  %s\n", d.KernelDenials.Why)
	} else {
		fmt.Fprintf(out, "  S1 cannot log them: %s\n", d.KernelDenials.Why)
	}
	fmt.Fprintln(out, "devices")
	for _, dv := range d.Devices {
		mark := "no "
		if dv.Available {
			mark = "yes"
		}
		fmt.Fprintf(out, "  %-18s %-4s %s  %s\n", dv.Executor, dv.Class, mark, dv.Reason)
	}
	fmt.Fprintln(out, "attribution")
	if d.Cgroups != nil {
		fmt.Fprintf(out, "  cgroups %s at %s: each run gets its own group\n", d.Cgroups.Kind, d.Cgroups.Root)
	} else {
		fmt.Fprintln(out, "  no cgroups (not root, or none mounted): run CPU time from the guest thread's CPU clock")
	}
}

func gcCmd(g *cli.Globals) *cobra.Command {
	var dry bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what killed or crashed sandbox processes left behind, and say what",
		Long: `Every sandbox process holds a lease (a locked file under leases/ in the
state directory) and names what it makes for a run with it: the run
directory being written (runs/.partial-*), S1 roots and CA bundles
(roots/), probe scratch, live sandboxes' workspaces and S5 VMs'
directories (QEMU's sockets and console) in the temporary directory, and cgroups
(sandbox/partial-* in each hierarchy). The kernel drops the lock when the
process ends, however it ends. gc removes everything named by a lease
that is no longer held (ending any process still in a leftover cgroup
first), then the lease. Nothing of a live process is touched, and
nothing is judged by its age. 'sandbox run' does the same before a run
when some lease is dead; 'sandbox doctor' lists leftovers without
removing them.

Things whose names carry no lease (made by a sandbox from before
leases) are listed as unowned and left alone.

Exit status: 0 when everything found was removed; 1 when something could
not be.`,
		Args: cli.UsageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := hostOf(g)
			if err != nil {
				return err
			}
			defer h.Close()
			ls, err := h.GC(dry)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, l := range ls {
				verb := "removed"
				switch {
				case l.Unowned:
					verb = "unowned"
				case l.Err != nil:
					verb, bad = "FAILED", bad+1
				case dry:
					verb = "would remove"
				}
				fmt.Fprintf(out, "%-12s %-16s %s", verb, l.Kind, l.Path)
				if l.Err != nil {
					fmt.Fprintf(out, ": %v", l.Err)
				}
				fmt.Fprintln(out)
			}
			if len(ls) == 0 {
				fmt.Fprintln(out, "nothing left behind")
			}
			if bad > 0 {
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&dry, "dry-run", "n", false, "list what would be removed, remove nothing")
	return cmd
}

// reportGC says in one line what a run's start removed, if anything.
func reportGC(w io.Writer, ls []live.Leftover) {
	removed, failed := 0, 0
	for _, l := range ls {
		switch {
		case l.Unowned || l.Kind == "lease":
		case l.Err != nil:
			failed++
		default:
			removed++
		}
	}
	if removed > 0 {
		fmt.Fprintf(w, "sandbox: removed %d things killed sandbox processes left (sandbox gc -n lists what is left)\n", removed)
	}
	if failed > 0 {
		fmt.Fprintf(w, "sandbox: %d things killed sandbox processes left could not be removed: see sandbox gc\n", failed)
	}
}
