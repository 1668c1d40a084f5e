// Package engine is the half of the sandbox command line that runs the
// engine in this process: runs made here (run --local, or with no
// service), the service itself (serve, mcp), and the commands that read
// or write the state directory through the engine (runs, show, replay,
// verify, doctor, gc, records read here, record, export, import, image,
// manifest, vm, fleet, policy, vectors).
//
// It is linked only into sandbox-engine (cmd/sandbox-engine): the thin
// `sandbox` lists its commands as stubs (package cli) and executes
// sandbox-engine in their place. Each command here replaces its stub by
// name, in the stub's group; its summary is the stub's (tested).
package engine

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/locality"
)

// New is the engine the command line runs in sandbox-engine.
func New() *cli.Engine {
	return &cli.Engine{
		Commands: commands,
		Run:      runHere,
		Records:  recordsHere,
		ExitOf:   exitOf,
		Failed:   failed,
		Present:  presentHere,
		// An https:// service ($SANDBOX_HOST), checked against the
		// system's roots.
		DialTLS: (&tls.Dialer{}).DialContext,
	}
}

// commands are the full commands that replace the thin program's stubs.
func commands(g *cli.Globals) []*cobra.Command {
	return []*cobra.Command{
		runsCmd(g), showCmd(g), replayCmd(g),
		recordCmd(g), exportCmd(g), importCmd(g),
		imageCmd(g), manifestCmd(g), vmCmd(g),
		fleetCmd(g),
		verifyCmd(g), policyCmd(g), vectorsCmd(), proofCmd(g), jcpCmd(g), teeCmd(g),
		serveCmd(g), mcpCmd(g), clusterCmd(g),
		doctorCmd(g), gcCmd(g),
	}
}

// hostOf makes the engine for a command, with the limits of the flags,
// and the manager of its live sandboxes, which holds it; it is closed
// when the command ends (its lease).
func hostOf(g *cli.Globals) (*live.Manager, error) {
	d, err := g.StateDir()
	if err != nil {
		return nil, err
	}
	mem := int64(0)
	if g.Memory != "" {
		if mem, err = grant.ParseSize(g.Memory); err != nil {
			return nil, errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
		}
	}
	roots, err := egressRoots()
	if err != nil {
		return nil, err
	}
	loc, err := localityConfig(os.Getenv("SANDBOX_LOCALITY"))
	if err != nil {
		return nil, errs.Usage{Err: fmt.Errorf("SANDBOX_LOCALITY: %w", err)}
	}
	executors := builtin.Config{
		MemoryPages: g.MemoryPages, Memory: mem, Pids: g.Pids, CPUs: g.CPUs, EgressRoots: roots,
		VMImage: os.Getenv("SANDBOX_VM_IMAGE"), VMAccel: os.Getenv("SANDBOX_VM_ACCEL"),
		TEEProvider: os.Getenv("SANDBOX_TEE_PROVIDER"), TEERoot: os.Getenv("SANDBOX_TEE_ROOT"), Locality: loc,
	}
	h, err := host.New(host.Config{
		Home: d.Root, Rand: rand.Reader, Warm: g.Warm, CgroupRoot: os.Getenv("SANDBOX_CGROUP_ROOT"), SysfsRoot: os.Getenv("SANDBOX_SYSFS_ROOT"),
		TDP:       os.Getenv("SANDBOX_TDP"),
		Warn:      func(m string) { fmt.Fprintf(g.Stderr, "sandbox: warning: %s\n", m) },
		Log:       g.Log,
		Executors: executors.Executors,
	})
	var ce *host.ConfigError
	if errors.As(err, &ce) && ce.Field == "TDP" {
		return nil, errs.Usage{Err: fmt.Errorf("SANDBOX_TDP: %w", ce.Err)}
	}
	if err != nil {
		return nil, err
	}
	switch v := os.Getenv("SANDBOX_GPU_EXCLUSIVE"); v {
	case "", "0", "false":
	case "1", "true":
		h.GPUExclusive = true
	default:
		h.Close()
		return nil, errs.Usage{Err: fmt.Errorf("SANDBOX_GPU_EXCLUSIVE=%q: want 1 (this host gives each GPU to one run at a time, and nothing else uses them) or 0", v)}
	}
	m := live.New(h)
	g.AtEnd(func() { m.Close() })
	return m, nil
}

// localityConfig reads S7's locality configuration from path ("": none).
func localityConfig(path string) (*locality.Config, error) {
	if path == "" {
		return nil, nil
	}
	b, err := readLimited(path, locality.MaxConfigSize)
	if err != nil {
		return nil, err
	}
	return locality.ParseConfig(b)
}

// egressRoots are the roots the egress proxy verifies credential-injected
// servers with: the system's, plus the PEM file SANDBOX_EGRESS_ROOTS
// names (a private CA, or a test server's certificate).
func egressRoots() (*x509.CertPool, error) {
	path := os.Getenv("SANDBOX_EGRESS_ROOTS")
	if path == "" {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("SANDBOX_EGRESS_ROOTS: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// exitOf is the exit status of run's and exec's errors the engine
// makes: the program not found (127) or not executable (126).
func exitOf(err error) (int, bool) {
	var pe *host.ProgramError
	switch {
	case errors.As(err, &pe) && pe.NotFound:
		return cli.ExitNotFound, true
	case errors.As(err, &pe), errors.Is(err, executor.ErrNotExecutable):
		return cli.ExitCannotExec, true
	}
	return 0, false
}

// failed adds to run --json's object of a run that ended but could not
// be sealed what became of it.
func failed(err error, j *client.Result) {
	var ns *host.NotSealedError
	if errors.As(err, &ns) && ns.Result != nil {
		j.Outcome = server.OutcomeOf(ns.Result)
		j.DurationMS = ns.Result.End.Sub(ns.Result.Start).Milliseconds()
		j.Notes = ns.Result.Notes
	}
}
