package spdm

import (
	"bytes"
	"crypto/x509"
	_ "embed"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"sync"
)

// The limits on a certificate chain.
const (
	// MaxChain is the largest chain ParseChain reads, PEM or DER.
	MaxChain = 256 << 10
	// MaxCerts is the most certificates in a chain.
	MaxCerts = 16
)

//go:embed nvidia_device_root.pem
var nvidiaRootPEM []byte

var roots = sync.OnceValue(func() *x509.CertPool {
	certs, err := ParseChain(nvidiaRootPEM)
	if err != nil || len(certs) != 1 {
		panic(fmt.Sprintf("spdm: the embedded NVIDIA root does not parse: %v", err))
	}
	p := x509.NewCertPool()
	p.AddCert(certs[0])
	return p
})

// Roots is a new pool holding the one root this package trusts by
// default: NVIDIA's Device Identity CA (self-signed, ECDSA P-384,
// valid from 2021-11-05 to 9999-12-31), which every NVIDIA GPU's device
// certificate chains to. Build it once and reuse it.
func Roots() *x509.CertPool { return roots().Clone() }

// ParseChain reads a certificate chain, the device's certificate first:
// PEM CERTIFICATE blocks (as NVIDIA's tools write it, the root last) or
// DER certificates one after another (as SPDM's CERTIFICATE response
// carries them, after its header). Text around PEM blocks is allowed;
// another kind of PEM block is not.
func ParseChain(b []byte) ([]*x509.Certificate, error) {
	if len(b) > MaxChain {
		return nil, errorf(ErrTooLarge, "chain", "%d bytes, over the limit of %d", len(b), MaxChain)
	}
	var certs []*x509.Certificate
	if !bytes.Contains(b, []byte("-----BEGIN")) {
		c, err := x509.ParseCertificates(b)
		if err != nil {
			return nil, wrap(ErrMalformed, "chain", err)
		}
		certs = c
	} else {
		for rest := b; len(bytes.TrimSpace(rest)) > 0; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				if bytes.Contains(rest, []byte("-----BEGIN")) {
					return nil, errorf(ErrMalformed, fmt.Sprintf("certificate %d", len(certs)), "a PEM block that does not decode")
				}
				break
			}
			if blk.Type != "CERTIFICATE" {
				return nil, errorf(ErrMalformed, fmt.Sprintf("certificate %d", len(certs)), "a PEM block of type %q", blk.Type)
			}
			if len(certs) == MaxCerts {
				return nil, errorf(ErrTooLarge, "chain", "more than %d certificates", MaxCerts)
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, wrap(ErrMalformed, fmt.Sprintf("certificate %d", len(certs)), err)
			}
			certs = append(certs, c)
		}
	}
	switch {
	case len(certs) == 0:
		return nil, errorf(ErrMalformed, "chain", "no certificate")
	case len(certs) > MaxCerts:
		return nil, errorf(ErrTooLarge, "chain", "more than %d certificates", MaxCerts)
	}
	return certs, nil
}

// oidFWID is the extension in which NVIDIA's device certificates name
// the firmware that holds their key (2.23.133.5.4.1, TCG's DICE arc).
var oidFWID = asn1.ObjectIdentifier{2, 23, 133, 5, 4, 1}

// compositeID is that extension's value as NVIDIA writes it: a version,
// the device's key, and the firmware's digest with its algorithm.
type compositeID struct {
	Version int
	Device  asn1.RawValue
	FWID    struct {
		Alg    asn1.ObjectIdentifier
		Digest []byte
	}
}

// certFWID is the firmware digest a certificate names, or nil.
func certFWID(c *x509.Certificate) []byte {
	for _, e := range c.Extensions {
		if !e.Id.Equal(oidFWID) {
			continue
		}
		var id compositeID
		if rest, err := asn1.Unmarshal(e.Value, &id); err != nil || len(rest) != 0 {
			return nil
		}
		return id.FWID.Digest
	}
	return nil
}
