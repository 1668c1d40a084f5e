package tee

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-configfs-tsm/configfs/configfsi"
	"github.com/google/go-configfs-tsm/report"
	"github.com/google/go-sev-guest/abi"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/tier"
)

// reportDir is configfs-tsm's report subsystem, as the kernel mounts it.
const reportDir = configfsi.TsmPrefix + "/report"

// The platforms configfs-tsm's provider attribute names, and the kind
// of evidence each makes.
var platforms = map[string]evidence.Kind{
	"sev_guest": evidence.SNP,
	"tdx_guest": evidence.TDX,
}

// ConfigFS is the configfs-tsm provider: it asks the kernel for a
// report through /sys/kernel/config/tsm/report (Linux 6.7 and later, on
// an SEV-SNP or TDX guest), with go-configfs-tsm. Use it by pointer;
// the zero value reads the real "/".
type ConfigFS struct {
	// Root is the directory the kernel's files are under: "" or "/"
	// for the real ones; a test's tree otherwise.
	Root string

	// client replaces the files under Root (tests: the kernel's side
	// of configfs, around them).
	client configfsi.Client
	kept   tier.Kept
}

// Name is "configfs-tsm".
func (*ConfigFS) Name() string { return "configfs-tsm" }

func (c *ConfigFS) files() configfsi.Client {
	if c.client != nil {
		return c.client
	}
	return files{root: c.Root}
}

// dir is where the report subsystem is on this host.
func (c *ConfigFS) dir() string {
	root := c.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.FromSlash(reportDir))
}

// Probe is available when the report subsystem is a directory, a report
// entry can be made in it and its provider is SEV-SNP's or TDX's. An
// available answer is kept; an unavailable one is asked again.
func (c *ConfigFS) Probe() tier.Probe {
	return c.kept.Get(c.probe)
}

func (c *ConfigFS) probe() tier.Probe {
	if why := c.missing(); why != "" {
		return tier.Probe{Reason: why}
	}
	client := c.files()
	entry, err := client.MkdirTemp(reportDir, "probe")
	if err != nil {
		return tier.Probe{Reason: fmt.Sprintf("cannot make a report entry in %s: %v (making reports needs root, or write access to configfs)", c.dir(), err)}
	}
	provider, err := client.ReadFile(path.Join(entry, "provider"))
	rmErr := client.RemoveAll(entry)
	switch {
	case err != nil:
		return tier.Probe{Reason: fmt.Sprintf("cannot read the report provider in %s: %v", c.dir(), err)}
	case rmErr != nil:
		return tier.Probe{Reason: fmt.Sprintf("cannot remove the probe's report entry %s: %v", entry, rmErr)}
	}
	name := strings.TrimSpace(string(provider))
	kind, ok := platforms[name]
	if !ok {
		return tier.Probe{Reason: fmt.Sprintf("the report provider is %q: neither sev_guest (SEV-SNP) nor tdx_guest (TDX)", name)}
	}
	return tier.Probe{Available: true, Reason: fmt.Sprintf("%s (%s) reports through %s", name, kind, c.dir())}
}

// missing says why the report subsystem is not here, or "".
func (c *ConfigFS) missing() string {
	fi, err := os.Stat(c.dir())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("no %s: this host is not a confidential VM (SEV-SNP or TDX guest), or configfs is not mounted (mount -t configfs none /sys/kernel/config)", c.dir())
	case err != nil:
		return fmt.Sprintf("cannot read %s: %v", c.dir(), err)
	case !fi.IsDir():
		return fmt.Sprintf("%s is not a directory: not configfs-tsm's report subsystem", c.dir())
	}
	return ""
}

// Evidence asks the kernel for a report whose report_data is data, with
// its auxiliary blob: for SEV-SNP the certificate table, which follows
// the 1184-byte report in Evidence.Report, as evidence.Verify reads it.
// The kernel writes data into the report; that the report carries it is
// the verifier's to check (evidence.Policy.ReportData).
func (c *ConfigFS) Evidence(ctx context.Context, data [ReportDataSize]byte) (Evidence, error) {
	if err := ctx.Err(); err != nil {
		return Evidence{}, err
	}
	if why := c.missing(); why != "" {
		return Evidence{}, fmt.Errorf("%w: configfs-tsm: %s", ErrUnavailable, why)
	}
	resp, err := report.Get(c.files(), &report.Request{InBlob: data[:], GetAuxBlob: true})
	if g := report.GetGenerationErr(err); g != nil {
		return Evidence{}, fmt.Errorf("configfs-tsm: another writer changed the report entry while it was read (%s generation %d, expected %d); ask again: %w",
			g.Attribute, g.Got, g.Want, err)
	}
	if err != nil {
		return Evidence{}, fmt.Errorf("configfs-tsm: %w", err)
	}
	name := strings.TrimSpace(string(resp.Provider))
	kind, ok := platforms[name]
	switch {
	case !ok:
		return Evidence{}, fmt.Errorf("%w: the provider is %q, neither sev_guest (SEV-SNP) nor tdx_guest (TDX)", ErrBadReport, name)
	case len(resp.OutBlob) == 0:
		return Evidence{}, fmt.Errorf("%w: %s gave an empty outblob", ErrBadReport, name)
	case len(resp.OutBlob)+len(resp.AuxBlob) > evidence.MaxSize:
		return Evidence{}, fmt.Errorf("%w: %s gave a report and auxblob over the limit of %d bytes together (read no further)",
			ErrBadReport, name, evidence.MaxSize)
	case kind == evidence.SNP && len(resp.OutBlob) != abi.ReportSize:
		return Evidence{}, fmt.Errorf("%w: sev_guest gave a %d-byte outblob; an SEV-SNP report is %d bytes", ErrBadReport, len(resp.OutBlob), abi.ReportSize)
	}
	// A TDX quote carries its PCK chain itself; only SEV-SNP's auxblob
	// (the certificate table) is evidence the verifier reads.
	out := bytes.Clone(resp.OutBlob)
	if kind == evidence.SNP {
		out = append(out, resp.AuxBlob...)
	}
	return Evidence{Provider: c.Name(), Platform: name, Report: out}, nil
}

// files is configfsi.Client on the kernel's files under root: the
// library's paths (/sys/kernel/config/tsm/...) are taken under root.
// Like go-configfs-tsm's Linux client, it removes a report entry with
// rmdir (configfs removes its attributes with it), and it writes only
// attributes that exist.
type files struct{ root string }

// path is where name, one of configfs-tsm's paths, is under root.
func (f files) path(name string) (string, error) {
	if _, err := configfsi.ParseTsmPath(name); err != nil {
		return "", err
	}
	root := f.root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.FromSlash(path.Clean(name))), nil
}

func (f files) MkdirTemp(dir, pattern string) (string, error) {
	p, err := f.path(dir)
	if err != nil {
		return "", err
	}
	made, err := os.MkdirTemp(p, pattern)
	if err != nil {
		return "", err
	}
	return path.Join(dir, filepath.Base(made)), nil
}

// ReadFile reads at most evidence.MaxSize+1 bytes: enough to tell an
// oversized report, never an unbounded read.
func (f files) ReadFile(name string) ([]byte, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	fd, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	return io.ReadAll(io.LimitReader(fd, evidence.MaxSize+1))
}

func (f files) ReadDir(name string) ([]os.DirEntry, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(p)
}

func (f files) WriteFile(name string, contents []byte) error {
	p, err := f.path(name)
	if err != nil {
		return err
	}
	fd, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = fd.Write(contents)
	return errors.Join(err, fd.Close())
}

func (f files) RemoveAll(name string) error {
	p, err := f.path(name)
	if err != nil {
		return err
	}
	return os.Remove(p)
}
