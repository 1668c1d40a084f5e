package locality

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/key"
)

// Measure is the host's side of one round trip to the anchor at
// anchorURL (its scheme, host and port): it asks for a nonce, answers it
// with host's signature over the nonce, the anchor's key and binding, and
// returns the anchor's signed measurement, after checking that it is the
// anchor's signature over this round trip. It does not know whether the
// anchor is one a verifier trusts; Verify does.
func Measure(ctx context.Context, anchorURL string, host key.Private, binding addr.Addr) (Measurement, error) {
	return MeasureWith(ctx, http.DefaultClient, anchorURL, host, binding)
}

// MeasureWith is Measure over client.
func MeasureWith(ctx context.Context, client *http.Client, anchorURL string, host key.Private, binding addr.Addr) (Measurement, error) {
	base := strings.TrimSuffix(anchorURL, "/")
	var ch Challenge
	if err := post(ctx, client, base+ChallengePath, ChallengeRequest{Host: host.Public(), Binding: binding}, &ch); err != nil {
		return Measurement{}, fmt.Errorf("locality: %s: challenge: %w", anchorURL, err)
	}
	if len(ch.Nonce) != NonceSize {
		return Measurement{}, fmt.Errorf("locality: %s: a nonce of %d bytes, want %d", anchorURL, len(ch.Nonce), NonceSize)
	}
	sig := host.Sign(AnswerBytes(ch.Nonce, ch.Anchor, binding))
	var m Measurement
	if err := post(ctx, client, base+AnswerPath, Answer{Nonce: ch.Nonce, HostSig: sig}, &m); err != nil {
		return Measurement{}, fmt.Errorf("locality: %s: answer: %w", anchorURL, err)
	}
	s := m.Statement
	if err := m.check("measurement"); err != nil {
		return Measurement{}, fmt.Errorf("locality: %s: %w", anchorURL, err)
	}
	msg, err := s.SignedBytes()
	if err != nil {
		return Measurement{}, fmt.Errorf("locality: %s: %w", anchorURL, err)
	}
	switch {
	case s.Anchor != ch.Anchor || !s.Anchor.Verify(msg, m.Signature):
		return Measurement{}, fmt.Errorf("locality: %s: the measurement is not signed by the anchor that sent the nonce", anchorURL)
	case !bytes.Equal(s.Nonce, ch.Nonce) || s.Host != host.Public() || s.Binding != binding || !bytes.Equal(s.HostSig, sig):
		return Measurement{}, fmt.Errorf("locality: %s: the measurement is of another round trip", anchorURL)
	}
	return m, nil
}

// post sends in as JSON and reads the reply into out.
func post(ctx context.Context, client *http.Client, url string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxClaimSize))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
