package evidence

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	spb "github.com/google/go-sev-guest/proto/sevsnp"
	"github.com/google/go-sev-guest/verify"
	"github.com/google/go-sev-guest/verify/trust"

	"github.com/opensubstrate/sandbox/reject"
)

// amdRoots are AMD's ARK and ASK/ASVK for each product line, as AMD's
// KDS publishes them (bundled by go-sev-guest), the VCEK and the VLEK
// intermediates under one ARK.
var amdRoots = sync.OnceValues(func() (map[string]*trust.AMDRootCerts, error) {
	bundles := map[string][2][]byte{
		"Milan": {trust.AskArkMilanVcekBytes, trust.AskArkMilanVlekBytes},
		"Genoa": {trust.AskArkGenoaVcekBytes, trust.AskArkGenoaVlekBytes},
		"Turin": {trust.AskArkTurinVcekBytes, trust.AskArkTurinVlekBytes},
	}
	out := map[string]*trust.AMDRootCerts{}
	for line, b := range bundles {
		vcek, err := kdsChain(b[0])
		if err != nil {
			return nil, fmt.Errorf("the bundled %s VCEK chain: %w", line, err)
		}
		vlek, err := kdsChain(b[1])
		if err != nil {
			return nil, fmt.Errorf("the bundled %s VLEK chain: %w", line, err)
		}
		if vcek.Ark == nil || vlek.Ark == nil || !vcek.Ark.Equal(vlek.Ark) {
			return nil, fmt.Errorf("the bundled %s chains name two ARKs", line)
		}
		r := trust.AMDRootCertsProduct(line)
		r.ProductCerts = &trust.ProductCerts{Ark: vcek.Ark, Ask: vcek.Ask, Asvk: vlek.Asvk}
		out[line] = r
	}
	return out, nil
})

// kdsChain reads a KDS cert_chain bundle: the ASK (or ASVK), then the
// ARK, in PEM. (Some of AMD's bundles end in stray bytes after the
// second certificate, which go-sev-guest's own parser refuses.)
func kdsChain(b []byte) (*trust.ProductCerts, error) {
	var ders [][]byte
	for len(ders) < 2 {
		var p *pem.Block
		if p, b = pem.Decode(b); p == nil {
			return nil, fmt.Errorf("%d PEM certificates; want 2", len(ders))
		}
		ders = append(ders, p.Bytes)
	}
	pc := new(trust.ProductCerts)
	if err := pc.Decode(ders[0], ders[1]); err != nil {
		return nil, err
	}
	if pc.Ark == nil || (pc.Ask == nil && pc.Asvk == nil) {
		return nil, errors.New("not an intermediate and a root")
	}
	return pc, nil
}

// kdsDir serves AMD KDS requests from a directory laid out as the
// service's URL paths (query included in the file name).
type kdsDir string

func (d kdsDir) Get(url string) ([]byte, error) {
	rest, ok := strings.CutPrefix(url, "https://kdsintf.amd.com/")
	if !ok || strings.Contains(rest, "..") {
		return nil, fmt.Errorf("not a KDS URL: %s", url)
	}
	b, err := os.ReadFile(filepath.Join(string(d), filepath.FromSlash(rest)))
	if err != nil {
		return nil, fmt.Errorf("the offline KDS store has no %s: %w", rest, err)
	}
	return b, nil
}

// certDER returns the DER of a PEM or DER certificate.
func certDER(b []byte) []byte {
	if p, _ := pem.Decode(b); p != nil && p.Type == "CERTIFICATE" {
		return p.Bytes
	}
	return b
}

func verifySNP(b []byte, o Options) (*Result, error) {
	if len(b) < abi.ReportSize {
		return nil, reject.New(reject.EvidenceMalformed, "sev-snp", "truncated at offset %d: a report is %d bytes", len(b), abi.ReportSize)
	}
	raw := b[:abi.ReportSize]
	if err := abi.ValidateReportFormat(raw); err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "sev-snp", "%v", err)
	}
	report, err := abi.ReportToProto(raw)
	if err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "sev-snp", "%v", err)
	}
	info, err := abi.ParseSignerInfo(report.GetSignerInfo())
	if err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "sev-snp.signer_info", "%v", err)
	}
	chain := &spb.CertificateChain{Extras: map[string][]byte{}}
	if len(b) > abi.ReportSize {
		table := new(abi.CertTable)
		if err := table.Unmarshal(b[abi.ReportSize:]); err != nil {
			return nil, reject.New(reject.EvidenceMalformed, fmt.Sprintf("sev-snp certificate table at offset %d", abi.ReportSize), "%v", err)
		}
		chain = table.Proto()
	}
	for i, c := range o.Certs {
		where := fmt.Sprintf("certificate %d", i+1)
		if p, rest := pem.Decode(c); p != nil {
			if next, _ := pem.Decode(rest); next != nil {
				return nil, reject.New(reject.EvidenceCert, where, "more than one PEM block: give the VCEK or VLEK alone (the ASK and ARK are bundled)")
			}
		}
		der := certDER(c)
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, reject.New(reject.EvidenceCert, where, "%v", err)
		}
		switch cn := cert.Subject.CommonName; cn {
		case "SEV-VCEK":
			chain.VcekCert = der
		case "SEV-VLEK":
			chain.VlekCert = der
		default:
			return nil, reject.New(reject.EvidenceCert, where, "%q is not an endorsement key (SEV-VCEK, SEV-VLEK); the ASK, ASVK and ARK are the bundled ones", cn)
		}
	}
	var signer string
	var ekDER []byte
	switch info.SigningKey {
	case abi.VcekReportSigner:
		signer, ekDER = "VCEK", chain.GetVcekCert()
	case abi.VlekReportSigner:
		signer, ekDER = "VLEK", chain.GetVlekCert()
	default:
		return nil, reject.New(reject.EvidenceCert, "sev-snp.signer_info", "the report is signed by no endorsement key (%v)", info.SigningKey)
	}
	if len(ekDER) == 0 && o.KDS != "" && info.SigningKey == abi.VcekReportSigner {
		// A v2 report names no product: AMD's KDS serves Milan's VCEKs
		// at the Milan path, as go-sev-guest assumes.
		line := "Milan"
		if fms := report.GetCpuid1EaxFms(); fms != 0 {
			line = kds.ProductLineFromFms(fms)
		}
		url := kds.VCEKCertURL(line, report.GetChipId(), kds.TCBVersion(report.GetReportedTcb()))
		if ekDER, err = kdsDir(o.KDS).Get(url); err != nil {
			return nil, reject.New(reject.EvidenceCert, "sev-snp", "%v", err)
		}
		ekDER = certDER(ekDER)
		chain.VcekCert = ekDER
	}
	if len(ekDER) == 0 {
		return nil, reject.New(reject.EvidenceCert, "sev-snp", "the report is signed by a %s the evidence does not carry: give it (--cert) or an offline KDS store", signer)
	}
	att := &spb.Attestation{Report: report, CertificateChain: chain}
	opts := &verify.Options{DisableCertFetching: true, Now: o.At}
	ek, err := x509.ParseCertificate(ekDER)
	if err != nil {
		return nil, reject.New(reject.EvidenceCert, "sev-snp."+strings.ToLower(signer), "%v", err)
	}
	if want := "SEV-" + signer; ek.Subject.CommonName != want {
		return nil, reject.New(reject.EvidenceCert, "sev-snp."+strings.ToLower(signer), "the certificate is %q; the report is signed by a %s", ek.Subject.CommonName, want)
	}
	exts, err := kds.CertificateExtensions(ek, info.SigningKey)
	if err != nil {
		return nil, reject.New(reject.EvidenceCert, "sev-snp."+strings.ToLower(signer), "its AMD extensions: %v", err)
	}
	line := ""
	if fms := report.GetCpuid1EaxFms(); fms != 0 {
		line = kds.ProductLineFromFms(fms)
	} else if p, err := kds.ParseProductName(exts.ProductName, info.SigningKey); err == nil {
		line = kds.ProductLine(p)
	} else {
		return nil, reject.New(reject.EvidenceCert, "sev-snp."+strings.ToLower(signer), "its product name %q: %v", exts.ProductName, err)
	}
	all, err := amdRoots()
	if err != nil {
		return nil, err
	}
	rootsOf := line
	if o.Product != "" {
		rootsOf = o.Product
	}
	roots, ok := all[rootsOf]
	if !ok {
		return nil, reject.New(reject.EvidenceUnsupported, "sev-snp", "no bundled AMD roots for the product line %q (bundled: Milan, Genoa, Turin)", rootsOf)
	}
	ica := roots.ProductCerts.Ask
	if info.SigningKey == abi.VlekReportSigner {
		ica = roots.ProductCerts.Asvk
	}
	if err := validAt("sev-snp chain", o.At, ek, ica, roots.ProductCerts.Ark); err != nil {
		return nil, err
	}
	if _, err := ek.Verify(*roots.X509Options(o.At, info.SigningKey)); err != nil {
		return nil, reject.New(reject.EvidenceChain, "sev-snp chain", "the %s does not chain to AMD's %s root: %v", signer, rootsOf, err)
	}
	if err := verify.SnpReportSignature(raw, ek); err != nil {
		return nil, reject.New(reject.EvidenceSignature, "sev-snp.signature", "%v", err)
	}
	opts.TrustedRoots = map[string][]*trust.AMDRootCerts{line: {roots}}
	if err := verify.SnpAttestation(att, opts); err != nil {
		return nil, reject.New(reject.EvidenceChain, "sev-snp chain", "the %s is not as AMD's KDS issues them for %s: %v", signer, rootsOf, err)
	}
	// The endorsement key is the chip's (VCEK) at the TCB the report
	// states: a certificate for another chip or another TCB does not
	// vouch for this report.
	if info.SigningKey == abi.VcekReportSigner && !allZero(report.GetChipId()) && !bytes.Equal(report.GetChipId(), exts.HWID) {
		return nil, reject.New(reject.EvidenceBinding, "sev-snp.chip_id", "%x is not the VCEK's hwID %x", report.GetChipId(), exts.HWID)
	}
	if uint64(exts.TCBVersion) != report.GetReportedTcb() {
		return nil, reject.New(reject.EvidenceBinding, "sev-snp.reported_tcb", "%s; the %s is for %s",
			tcbOf(report.GetReportedTcb()), signer, tcbOf(uint64(exts.TCBVersion)))
	}
	if err := checkSNPPolicy(report, o.Policy); err != nil {
		return nil, err
	}
	vmpl := int(report.GetVmpl())
	return &Result{
		Kind: SNP, Version: report.GetVersion(), Product: line, Signer: signer,
		Measurement: hex.EncodeToString(report.GetMeasurement()),
		ReportData:  hex.EncodeToString(report.GetReportData()),
		HostData:    hex.EncodeToString(report.GetHostData()),
		ChipID:      hex.EncodeToString(report.GetChipId()),
		TCB:         fmt.Sprintf("%016x", report.GetReportedTcb()),
		Debug:       debugOf(report), VMPL: &vmpl,
		Chain:      subjects(ek, ica, roots.ProductCerts.Ark),
		NotChecked: []string{"revocation: AMD's CRL is online"},
	}, nil
}

func debugOf(r *spb.Report) bool {
	p, err := abi.ParseSnpPolicy(r.GetPolicy())
	return err != nil || p.Debug
}

func tcbOf(v uint64) TCB {
	p := kds.DecomposeTCBVersion(kds.TCBVersion(v))
	return TCB{Bootloader: p.BlSpl, TEE: p.TeeSpl, SNP: p.SnpSpl, Microcode: p.UcodeSpl}
}

func checkSNPPolicy(r *spb.Report, p Policy) error {
	if err := checkCommon("sev-snp", p, r.GetVersion(), r.GetMeasurement(), r.GetReportData(), debugOf(r)); err != nil {
		return err
	}
	if p.VMPL != nil && uint32(*p.VMPL) != r.GetVmpl() {
		return reject.New(reject.EvidenceVMPL, "sev-snp.vmpl", "%d; the policy requires %d", r.GetVmpl(), *p.VMPL)
	}
	if m := p.MinTCB; m != nil {
		t := tcbOf(r.GetReportedTcb())
		if t.Bootloader < m.Bootloader || t.TEE < m.TEE || t.SNP < m.SNP || t.Microcode < m.Microcode {
			return reject.New(reject.EvidenceTCB, "sev-snp.reported_tcb", "%s is below the policy's %s", t, *m)
		}
	}
	if p.HostData != "" && !strings.EqualFold(p.HostData, hex.EncodeToString(r.GetHostData())) {
		return reject.New(reject.EvidenceHostData, "sev-snp.host_data", "%x, not the policy's %s", r.GetHostData(), p.HostData)
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
