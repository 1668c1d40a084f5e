package evidence

import (
	"crypto/x509"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/go-tdx-guest/abi"
	pb "github.com/google/go-tdx-guest/proto/tdx"
	"github.com/google/go-tdx-guest/verify"

	"github.com/opensubstrate/sandbox/reject"
)

// intelRoot is Intel's SGX Root CA, the root of every PCK chain (the
// copy go-tdx-guest bundles; roots/LICENSE.go-tdx-guest).
//
//go:embed roots/intel_sgx_root.pem
var intelRootPEM []byte

var intelRoot = sync.OnceValues(func() (*x509.Certificate, error) {
	p, _ := pem.Decode(intelRootPEM)
	if p == nil {
		return nil, errors.New("the bundled Intel root is not PEM")
	}
	return x509.ParseCertificate(p.Bytes)
})

// IntelRoot is the bundled Intel SGX Root CA.
func IntelRoot() (*x509.Certificate, error) { return intelRoot() }

// tdAttrDebug is TD_ATTRIBUTES bit 0: TUD.DEBUG, the TD is debuggable.
const tdAttrDebug = 1

func verifyTDX(b []byte, o Options) (*Result, error) {
	if v := binary.LittleEndian.Uint16(b); v != abi.QuoteVersion {
		return nil, reject.New(reject.EvidenceUnsupported, "tdx.header.version",
			"a TDX quote v%d: the verifier (go-tdx-guest v0.3.1) verifies v%d quotes only", v, abi.QuoteVersion)
	}
	q, err := abi.QuoteToProto(b)
	if err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "tdx", "%v", err)
	}
	quote, ok := q.(*pb.QuoteV4)
	if !ok {
		return nil, reject.New(reject.EvidenceUnsupported, "tdx", "a quote of type %T", q)
	}
	if err := abi.CheckQuoteV4(quote); err != nil {
		return nil, reject.New(reject.EvidenceMalformed, "tdx", "%v", err)
	}
	pck, ica, root, err := pckChain(quote)
	if err != nil {
		return nil, err
	}
	intel, err := intelRoot()
	if err != nil {
		return nil, err
	}
	if err := validAt("tdx pck chain", o.At, pck, ica, intel); err != nil {
		return nil, err
	}
	if !root.Equal(intel) {
		return nil, reject.New(reject.EvidenceChain, "tdx pck chain", "the quote's root %q is not Intel's SGX Root CA bundled here", root.Subject.CommonName)
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	pool.AddCert(intel)
	inter.AddCert(ica)
	if _, err := pck.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: o.At, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, reject.New(reject.EvidenceChain, "tdx pck chain", "the PCK does not chain to Intel's root: %v", err)
	}
	err = verify.TdxQuote(quote, &verify.Options{Now: o.At, TrustedRoots: pool})
	switch {
	case err == nil:
	case errors.Is(err, verify.ErrPCKCertChainInvalid), errors.Is(err, verify.ErrKeyMismatch), errors.Is(err, verify.ErrRootCertNil):
		return nil, reject.New(reject.EvidenceChain, "tdx pck chain", "%v", err)
	default:
		// The chain is checked above: what remains is the QE report's
		// signature by the PCK, its binding of the attestation key, and
		// the quote's signature by that key.
		return nil, reject.New(reject.EvidenceSignature, "tdx.signature", "%v", err)
	}
	body := quote.GetTdQuoteBody()
	debug := len(body.GetTdAttributes()) > 0 && body.GetTdAttributes()[0]&tdAttrDebug != 0
	if err := checkTDXPolicy(quote, o.Policy, debug); err != nil {
		return nil, err
	}
	return &Result{
		Kind: TDX, Version: quote.GetHeader().GetVersion(), Product: "TDX", Signer: "PCK",
		Measurement: hex.EncodeToString(body.GetMrTd()),
		ReportData:  hex.EncodeToString(body.GetReportData()),
		HostData:    hex.EncodeToString(body.GetMrConfigId()),
		TCB:         hex.EncodeToString(body.GetTeeTcbSvn()),
		Debug:       debug,
		Chain:       subjects(pck, ica, intel),
		NotChecked:  []string{"revocation: Intel's PCK CRL is online", "tcb-status: Intel's TCB info and QE identity are online (PCS)"},
	}, nil
}

// pckChain is the quote's PCK chain: leaf, intermediate, root.
func pckChain(q *pb.QuoteV4) (pck, ica, root *x509.Certificate, err error) {
	rest := q.GetSignedData().GetCertificationData().GetQeReportCertificationData().GetPckCertificateChainData().GetPckCertChain()
	var certs []*x509.Certificate
	for i := 0; i < 3; i++ {
		var p *pem.Block
		p, rest = pem.Decode(rest)
		if p == nil || p.Type != "CERTIFICATE" {
			return nil, nil, nil, reject.New(reject.EvidenceCert, "tdx pck chain", "certificate %d of 3 is missing or not a PEM certificate", i+1)
		}
		c, err := x509.ParseCertificate(p.Bytes)
		if err != nil {
			return nil, nil, nil, reject.New(reject.EvidenceCert, fmt.Sprintf("tdx pck chain certificate %d", i+1), "%v", err)
		}
		certs = append(certs, c)
	}
	return certs[0], certs[1], certs[2], nil
}

func checkTDXPolicy(q *pb.QuoteV4, p Policy, debug bool) error {
	body := q.GetTdQuoteBody()
	if err := checkCommon("tdx", p, q.GetHeader().GetVersion(), body.GetMrTd(), body.GetReportData(), debug); err != nil {
		return err
	}
	if p.MinTeeTCBSVN != "" {
		min, _ := hex.DecodeString(p.MinTeeTCBSVN)
		got := body.GetTeeTcbSvn()
		for i := range min {
			if i >= len(got) || got[i] < min[i] {
				return reject.New(reject.EvidenceTCB, "tdx.tee_tcb_svn", "%x is below the policy's %s at byte %d", got, p.MinTeeTCBSVN, i)
			}
		}
	}
	if p.HostData != "" && !strings.EqualFold(p.HostData, hex.EncodeToString(body.GetMrConfigId())) {
		return reject.New(reject.EvidenceHostData, "tdx.mr_config_id", "%x, not the policy's %s", body.GetMrConfigId(), p.HostData)
	}
	return nil
}
