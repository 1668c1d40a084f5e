package tee

import (
	"context"

	"github.com/opensubstrate/sandbox/device"

	"github.com/opensubstrate/sandbox/tier"
)

// ReportDataSize is the size of the binding a report carries.
const ReportDataSize = 64

// Evidence is what a provider returns for one binding.
type Evidence struct {
	// Provider names the provider: "configfs-tsm", "software".
	Provider string
	// Platform is what made the report, as the provider says it:
	// configfs-tsm's provider attribute ("sev_guest", "tdx_guest"), or
	// "software".
	Platform string
	// Report is the report (an SEV-SNP report, a TDX quote, a software
	// report), as evidence.Verify reads it; for SEV-SNP with a
	// certificate table, the table follows the report.
	Report []byte
	// Software is true for evidence no hardware vouches for.
	Software bool
}

// Provider obtains evidence bound to 64 bytes of report data.
type Provider interface {
	// Name is the provider's name ("configfs-tsm", "software").
	Name() string
	// Probe says whether the provider can give evidence here, and why
	// not.
	Probe() tier.Probe
	// Evidence returns a report whose report_data is data.
	Evidence(ctx context.Context, data [ReportDataSize]byte) (Evidence, error)
}

// Kind is the evidence kind of e's report, as package evidence names
// it: sev-snp, tdx, software; "" for a platform this package does not
// know.
func (e Evidence) Kind() string {
	switch {
	case e.Software:
		return "software"
	case e.Platform == "sev_guest":
		return "sev-snp"
	case e.Platform == "tdx_guest":
		return "tdx"
	}
	return ""
}

// DeviceEvidence is one device's evidence for a run (an NVIDIA GPU's
// SPDM measurement report): its class and identity, the kind of report,
// the report and the certificate chain that verifies it.
type DeviceEvidence struct {
	Class  device.Class
	ID     string
	Kind   string // "nvidia-spdm"
	Report []byte
	Chain  []byte // PEM
}
