package tee

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-configfs-tsm/configfs/configfsi"
	"github.com/google/go-configfs-tsm/report"
	"github.com/google/go-sev-guest/abi"
	spb "github.com/google/go-sev-guest/proto/sevsnp"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/errs"
)

// kernel is the kernel's side of configfs-tsm's report subsystem, on a
// directory tree laid out as configfs lays it out
// (<root>/sys/kernel/config/tsm/report/<entry>/{inblob,outblob,auxblob,
// provider,generation,privlevel,privlevel_floor}): around the provider's
// own file client, it does what the kernel does when userspace acts on
// those files. mkdir fills the entry with its attributes; a write bumps
// generation; a write of inblob makes the report; rmdir takes the
// attributes away. The report is a real one, made by hardware
// elsewhere: its report_data is that hardware's, not the inblob.
type kernel struct {
	configfsi.Client // the provider's own client on the tree
	root             string

	provider string // the provider attribute
	outblob  []byte // the report the platform makes
	auxblob  []byte // its auxiliary blob
	mkdirErr error  // mkdir refused (no provider registered, say)
	race     bool   // another writer bumps the generation after each write

	mu     sync.Mutex
	inblob [][]byte // what each inblob write put in the file
}

// tree makes the report subsystem's directory under a test's root.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/kernel/config/tsm/report"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// provider is a configfs-tsm provider on k's tree, with k as its kernel.
func (k *kernel) provide() *ConfigFS {
	k.Client = files{root: k.root}
	return &ConfigFS{Root: k.root, client: k}
}

func (k *kernel) host(name string) string {
	p, err := files{root: k.root}.path(name)
	if err != nil {
		panic(err)
	}
	return p
}

var attributes = []string{"inblob", "outblob", "auxblob", "provider", "generation", "privlevel", "privlevel_floor"}

func (k *kernel) MkdirTemp(dir, pattern string) (string, error) {
	if k.mkdirErr != nil {
		return "", &os.PathError{Op: "mkdir", Path: dir, Err: k.mkdirErr}
	}
	entry, err := k.Client.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	initial := map[string]string{"provider": k.provider + "\n", "generation": "0\n", "privlevel_floor": "0\n"}
	for _, a := range attributes {
		if err := os.WriteFile(k.host(path.Join(entry, a)), []byte(initial[a]), 0o644); err != nil {
			return "", err
		}
	}
	return entry, nil
}

func (k *kernel) WriteFile(name string, b []byte) error {
	attr := path.Base(name)
	switch attr {
	case "inblob":
		if len(b) > 64 {
			return &os.PathError{Op: "write", Path: name, Err: syscall.EINVAL}
		}
	case "privlevel":
	default:
		return &os.PathError{Op: "write", Path: name, Err: syscall.EACCES}
	}
	if err := k.Client.WriteFile(name, b); err != nil {
		return err
	}
	entry := path.Dir(name)
	bumps := 1
	if k.race {
		bumps++
	}
	if err := k.bump(entry, bumps); err != nil {
		return err
	}
	if attr != "inblob" {
		return nil
	}
	got, err := os.ReadFile(k.host(name))
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.inblob = append(k.inblob, got)
	k.mu.Unlock()
	return errors.Join(os.WriteFile(k.host(path.Join(entry, "outblob")), k.outblob, 0o444),
		os.WriteFile(k.host(path.Join(entry, "auxblob")), k.auxblob, 0o444))
}

func (k *kernel) bump(entry string, n int) error {
	g := k.host(path.Join(entry, "generation"))
	b, err := os.ReadFile(g)
	if err != nil {
		return err
	}
	v, err := configfsi.Kstrtouint(b, 10, 64)
	if err != nil {
		return err
	}
	return os.WriteFile(g, fmt.Appendf(nil, "%d\n", v+uint64(n)), 0o644)
}

// RemoveAll is rmdir on configfs: the kernel takes the attributes away
// with the directory.
func (k *kernel) RemoveAll(name string) error {
	for _, a := range attributes {
		if err := os.Remove(k.host(path.Join(name, a))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return k.Client.RemoveAll(name)
}

func (k *kernel) received() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.inblob
}

// entriesLeft fails the test if a report entry is left in the tree.
func entriesLeft(t *testing.T, root string) {
	t.Helper()
	left, err := os.ReadDir(filepath.Join(root, "sys/kernel/config/tsm/report"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("report entries left behind: %v", left)
	}
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "evidence", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// certTable is the SEV certificate table GET_EXT_REPORT returns (the
// auxblob): a VCEK entry, terminated by a zero entry, as go-sev-guest
// lays it out.
func certTable(t *testing.T) []byte {
	t.Helper()
	return abi.CertsFromProto(&spb.CertificateChain{VcekCert: testdata(t, "test-vcek.der")}).Marshal()
}

func at(s string) time.Time {
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return v
}

func binding() (d [ReportDataSize]byte) {
	for i := range d {
		d[i] = byte(i*7 + 1)
	}
	return d
}

// TestConfigFSReport: through the kernel's file layout, the provider
// writes exactly the 64 bytes of binding to inblob, reads a real
// report (SEV-SNP with its certificate table, TDX), and what it returns
// verifies with package evidence, chained to the vendor's root, with no
// certificate given but the table. Real hardware would also put the
// binding in report_data; these reports carry the one their hardware
// was given.
func TestConfigFSReport(t *testing.T) {
	for _, tc := range []struct {
		name, provider   string
		outblob, auxblob []byte
		at               time.Time
		debug            bool
		kind             evidence.Kind
		signer           string
		reportAndAuxblob bool
	}{
		{"sev-snp", "sev_guest", testdata(t, "test-report.bin"), certTable(t), at("2024-06-01T00:00:00Z"), false, evidence.SNP, "VCEK", true},
		{"tdx", "tdx_guest", testdata(t, "tdx_quote_4.dat"), nil, at("2023-06-01T00:00:00Z"), true, evidence.TDX, "PCK", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &kernel{root: tree(t), provider: tc.provider, outblob: tc.outblob, auxblob: tc.auxblob}
			c := k.provide()
			if p := c.Probe(); !p.Available || !strings.Contains(p.Reason, tc.provider) {
				t.Fatalf("probe: %+v", p)
			}
			data := binding()
			ev, err := c.Evidence(context.Background(), data)
			if err != nil {
				t.Fatal(err)
			}
			if in := k.received(); len(in) != 1 || !bytes.Equal(in[0], data[:]) {
				t.Fatalf("the kernel received %x; want the 64 bytes %x", in, data)
			}
			want := tc.outblob
			if tc.reportAndAuxblob {
				want = append(bytes.Clone(tc.outblob), tc.auxblob...)
			}
			if ev.Provider != "configfs-tsm" || ev.Platform != tc.provider || ev.Software || !bytes.Equal(ev.Report, want) {
				t.Fatalf("evidence %s %s software=%v, %d bytes; want %d", ev.Provider, ev.Platform, ev.Software, len(ev.Report), len(want))
			}
			r, err := evidence.Verify(ev.Report, evidence.Options{At: tc.at, Policy: evidence.Policy{AllowDebug: tc.debug}})
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != tc.kind || r.Signer != tc.signer || r.Software {
				t.Fatalf("verified as %s by %s (software %v)", r.Kind, r.Signer, r.Software)
			}
			entriesLeft(t, k.root)
		})
	}
}

// TestConfigFSRefusals: what the kernel answers that the provider will
// not pass on, each with a clear error, and no entry left behind.
func TestConfigFSRefusals(t *testing.T) {
	snp := testdata(t, "test-report.bin")
	for _, tc := range []struct {
		name string
		k    *kernel
		want string
		is   error
	}{
		{"another writer", &kernel{provider: "sev_guest", outblob: snp, race: true}, "another writer changed the report entry", nil},
		{"an unknown provider", &kernel{provider: "arm_cca_guest", outblob: snp}, `the provider is "arm_cca_guest"`, ErrBadReport},
		{"an empty outblob", &kernel{provider: "tdx_guest"}, "tdx_guest gave an empty outblob", ErrBadReport},
		{"an oversized outblob", &kernel{provider: "tdx_guest", outblob: make([]byte, evidence.MaxSize+1)}, "over the limit of 1048576 bytes", ErrBadReport},
		{"an oversized auxblob", &kernel{provider: "sev_guest", outblob: snp, auxblob: make([]byte, evidence.MaxSize)}, "over the limit of 1048576 bytes", ErrBadReport},
		{"a short SEV-SNP report", &kernel{provider: "sev_guest", outblob: snp[:1000]}, "1000-byte outblob", ErrBadReport},
		{"no provider registered", &kernel{provider: "sev_guest", mkdirErr: syscall.ENXIO}, "could not create report entry", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.k
			k.root = tree(t)
			_, err := k.provide().Evidence(context.Background(), binding())
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("got %v; want an error saying %q", err, tc.want)
			}
			var g *report.GenerationErr
			if k.race && !errors.As(err, &g) {
				t.Fatalf("%v does not carry the library's generation error", err)
			}
			entriesLeft(t, k.root)
		})
	}
}

// TestConfigFSUnavailable: without the report subsystem (here: an empty
// root, a file where the directory should be, no provider registered,
// an unknown one), the probe is unavailable with a reason a person can
// act on, and Evidence's error is in the unavailable category.
func TestConfigFSUnavailable(t *testing.T) {
	empty := t.TempDir()
	c := &ConfigFS{Root: empty}
	p := c.Probe()
	if p.Available || !strings.Contains(p.Reason, "not a confidential VM (SEV-SNP or TDX guest)") ||
		!strings.Contains(p.Reason, "mount -t configfs none /sys/kernel/config") {
		t.Fatalf("probe: %+v", p)
	}
	_, err := c.Evidence(context.Background(), binding())
	if !errors.Is(err, ErrUnavailable) || errs.Of(err) != errs.Unavailable || !strings.Contains(err.Error(), p.Reason) {
		t.Fatalf("evidence: %v (category %s)", err, errs.Of(err))
	}

	file := t.TempDir()
	if err := os.MkdirAll(filepath.Join(file, "sys/kernel/config/tsm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(file, "sys/kernel/config/tsm/report"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p := (&ConfigFS{Root: file}).Probe(); p.Available || !strings.Contains(p.Reason, "is not a directory") {
		t.Fatalf("probe: %+v", p)
	}

	for _, k := range []*kernel{
		{root: tree(t), provider: "sev_guest", mkdirErr: syscall.ENXIO},
		{root: tree(t), provider: "arm_cca_guest"},
	} {
		if p := k.provide().Probe(); p.Available || !strings.Contains(p.Reason, "report") {
			t.Fatalf("probe: %+v", p)
		}
		entriesLeft(t, k.root)
	}
}

// TestConfigFSThisHost: on this host, the real configfs-tsm. Where it is
// not a confidential VM, the provider says so and gives nothing.
func TestConfigFSThisHost(t *testing.T) {
	if _, err := os.Stat(reportDir); err == nil {
		t.Skipf("%s exists: this host may be a confidential VM; not making a report in a test", reportDir)
	}
	c, err := Select("", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Probe(); p.Available || !strings.Contains(p.Reason, "no /sys/kernel/config/tsm/report: this host is not a confidential VM") {
		t.Fatalf("probe: %+v", p)
	}
	if _, err := c.Evidence(context.Background(), binding()); errs.Of(err) != errs.Unavailable {
		t.Fatalf("evidence: %v; want unavailable", err)
	}
}

// TestConfigFSProbeKept: an available probe is kept, not made again.
func TestConfigFSProbeKept(t *testing.T) {
	k := &kernel{root: tree(t), provider: "tdx_guest"}
	c := k.provide()
	if !c.Probe().Available {
		t.Fatal("not available")
	}
	k.mkdirErr = syscall.ENXIO
	if !c.Probe().Available {
		t.Fatal("the available answer was not kept")
	}
}

// TestFilesPaths: the client takes only configfs-tsm's paths, under its
// root.
func TestFilesPaths(t *testing.T) {
	f := files{root: "/fake"}
	for name, want := range map[string]string{
		"/sys/kernel/config/tsm/report":           "/fake/sys/kernel/config/tsm/report",
		"/sys/kernel/config/tsm/report/e1/inblob": "/fake/sys/kernel/config/tsm/report/e1/inblob",
	} {
		if got, err := f.path(name); err != nil || got != want {
			t.Errorf("path(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"/etc/passwd", "/sys/kernel/config/tsm/../../../../etc/passwd", "relative"} {
		if got, err := f.path(name); err == nil {
			t.Errorf("path(%q) = %q; want an error", name, got)
		}
	}
	if _, err := (&ConfigFS{Root: t.TempDir()}).Evidence(canceled(), binding()); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled context: %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
