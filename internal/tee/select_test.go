package tee

import (
	"context"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/errs"
)

// TestSelect: configfs-tsm is the default; software only by name and
// with a key; any other name is invalid and the error lists the names.
func TestSelect(t *testing.T) {
	k := key(t)
	for _, tc := range []struct {
		name string
		key  bool
		want string
	}{
		{"", true, "configfs-tsm"},
		{"", false, "configfs-tsm"},
		{"configfs-tsm", true, "configfs-tsm"},
		{"software", true, "software"},
	} {
		var sk []byte
		if tc.key {
			sk = k
		}
		p, err := Select(tc.name, t.TempDir(), sk)
		if err != nil || p.Name() != tc.want {
			t.Errorf("Select(%q) = %v, %v; want %s", tc.name, p, err, tc.want)
		}
	}
	if _, err := Select("software", "", nil); err == nil {
		t.Error("software without a key was selected")
	}
	_, err := Select("sgx", "", k)
	if errs.Of(err) != errs.Invalid || !strings.Contains(err.Error(), `"configfs-tsm" (the default) and "software"`) {
		t.Errorf("an unknown name: %v (category %s)", err, errs.Of(err))
	}
}

// TestConformance: what every provider promises, for each one that can
// run here: its evidence names it, carries a report of a kind the
// verifier knows, and says software exactly when no hardware made it.
func TestConformance(t *testing.T) {
	for _, p := range []Provider{
		&Software{Key: key(t)},
		(&kernel{root: tree(t), provider: "sev_guest", outblob: testdata(t, "test-report.bin"), auxblob: certTable(t)}).provide(),
		(&kernel{root: tree(t), provider: "tdx_guest", outblob: testdata(t, "tdx_quote_4.dat")}).provide(),
	} {
		t.Run(p.Name(), func(t *testing.T) { conform(t, p) })
	}
}

func conform(t *testing.T, p Provider) {
	if !p.Probe().Available {
		t.Fatalf("probe: %+v", p.Probe())
	}
	ev, err := p.Evidence(context.Background(), binding())
	if err != nil {
		t.Fatal(err)
	}
	if ev.Provider != p.Name() || len(ev.Report) == 0 || ev.Platform == "" {
		t.Fatalf("evidence: %s %s, %d bytes", ev.Provider, ev.Platform, len(ev.Report))
	}
	if ev.Software != (p.Name() == "software") {
		t.Fatalf("software = %v for %s", ev.Software, p.Name())
	}
	if _, err := p.Evidence(canceled(), binding()); err == nil {
		t.Fatal("a canceled context gave evidence")
	}
}
