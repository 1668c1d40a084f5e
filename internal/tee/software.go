package tee

import (
	"context"
	"crypto/ed25519"
	"crypto/sha512"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/tier"
)

// Software is the software provider: it makes sandbox.software-evidence/1
// reports signed with Key, for tests and wiring only. Its evidence says
// software everywhere; evidence.Verify refuses it unless the verifier
// allows software, and Select never chooses it unless it is named. The
// zero value has no key and gives nothing.
type Software struct {
	// Key signs the reports.
	Key ed25519.PrivateKey
	// Measurement is what a report states was measured (48 bytes);
	// nil: the SHA-384 of the running executable.
	Measurement []byte
	// Now is the clock a report's time is read from; nil: time.Now.
	Now func() time.Time
}

// Name is "software".
func (*Software) Name() string { return "software" }

// Probe is available when there is a key, and says what the evidence
// is worth.
func (s *Software) Probe() tier.Probe {
	if len(s.Key) != ed25519.PrivateKeySize {
		return tier.Probe{Reason: "software provider: no Ed25519 key to sign with"}
	}
	return tier.Probe{Available: true, Reason: "software-grounded: for tests and wiring only, no hardware vouches for it"}
}

// Evidence signs a software report bound to data.
func (s *Software) Evidence(ctx context.Context, data [ReportDataSize]byte) (Evidence, error) {
	if err := ctx.Err(); err != nil {
		return Evidence{}, err
	}
	if len(s.Key) != ed25519.PrivateKeySize {
		return Evidence{}, fmt.Errorf("%w: software provider: no Ed25519 key to sign with", ErrUnavailable)
	}
	m, err := s.measure()
	if err != nil {
		return Evidence{}, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	b, err := evidence.SignSoftware(s.Key, data, m, now())
	if err != nil {
		return Evidence{}, fmt.Errorf("software provider: %w", err)
	}
	return Evidence{Provider: s.Name(), Platform: "software", Report: b, Software: true}, nil
}

// measure is the measurement given, or the SHA-384 of the running
// executable.
func (s *Software) measure() (m [48]byte, err error) {
	if s.Measurement != nil {
		if len(s.Measurement) != len(m) {
			return m, fmt.Errorf("software provider: a measurement is %d bytes, not %d", len(m), len(s.Measurement))
		}
		copy(m[:], s.Measurement)
		return m, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return m, fmt.Errorf("software provider: measuring the executable: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return m, fmt.Errorf("software provider: measuring the executable: %w", err)
	}
	defer f.Close()
	h := sha512.New384()
	if _, err := io.Copy(h, f); err != nil {
		return m, fmt.Errorf("software provider: measuring %s: %w", exe, err)
	}
	copy(m[:], h.Sum(nil))
	return m, nil
}
