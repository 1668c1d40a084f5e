package vectors

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/manifest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// KindEnvironment is the environment-manifest vectors' kind
// (positive/environment.json).
const KindEnvironment = "environment"

// EnvironmentType is environment.json's "type".
const EnvironmentType = "sandbox.environment-vectors/1"

// Environment is environment.json: devcontainer.json inputs and what a
// conforming reader makes of each (docs/spec/manifest.md).
type Environment struct {
	Type   string            `json:"type"`
	Signer key.Public        `json:"signer"`
	Cases  []EnvironmentCase `json:"cases"`
}

// EnvironmentCase is one devcontainer.json. A positive gives the
// manifest's canonical bytes as the signer makes them, its address and
// whether it is pinned; a negative the reject code and the fields named.
type EnvironmentCase struct {
	Name         string     `json:"name"`
	Devcontainer string     `json:"devcontainer"`
	Expect       string     `json:"expect"`
	Manifest     string     `json:"manifest,omitempty"`
	Addr         *addr.Addr `json:"address,omitempty"`
	Pinned       bool       `json:"pinned,omitempty"`
	Fields       []string   `json:"fields,omitempty"`
	// Pad is a number of spaces after the devcontainer.json, which are
	// part of the input (so that an input over the reader's bound need
	// not be written out).
	Pad int `json:"pad,omitempty"`
}

// input is the case's devcontainer.json, padded.
func (c *EnvironmentCase) input() []byte {
	return []byte(c.Devcontainer + strings.Repeat(" ", c.Pad))
}

const vd = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// environmentVectors builds environment.json, the manifests signed by k.
func environmentVectors(k key.Private) ([]byte, error) {
	pos := []struct{ name, src string }{
		{"pinned", `{"image":"debian` + vd + `","features":{"ghcr.io/devcontainers/features/go` + vd + `":{"version":"1.26"}}}`},
		{"tag-not-pinned", `{"image":"debian:13"}`},
		{"jsonc", "{\n  // a comment\n  \"image\": \"debian:13\", /* another */\n  \"forwardPorts\": [8080, 3000,],\n}\n"},
		{"declarative-subset", `{"name":"dev","image":"debian` + vd + `","containerEnv":{"A":"1"},"remoteEnv":{"B":"2"},"containerUser":"root","remoteUser":"dev","workspaceFolder":"/w","hostRequirements":{"cpus":2,"memory":"4gb","gpu":"optional"},"features":{"ghcr.io/f/x` + vd + `":"1","ghcr.io/f/y:2":{"flag":true,"n":3}}}`},
		{"left-out", `{"$schema":"https://x","image":"debian:13","customizations":{"vscode":{}},"portsAttributes":{"80":{}},"otherPortsAttributes":{},"shutdownAction":"none","overrideCommand":true,"updateRemoteUserUID":true,"waitFor":"onCreateCommand"}`},
		{"gpu-false", `{"image":"debian:13","hostRequirements":{"gpu":false}}`},
	}
	neg := []struct {
		name, src string
		code      reject.Code
		fields    []string
		pad       int
	}{
		{"command", `{"image":"a","postCreateCommand":"make"}`, reject.Invalid, []string{"postCreateCommand"}, 0},
		{"commands", `{"image":"a","onCreateCommand":"a","updateContentCommand":"b","postStartCommand":"c","postAttachCommand":"d","initializeCommand":"e","userEnvProbe":"loginShell"}`, reject.Invalid, []string{"onCreateCommand", "updateContentCommand", "postStartCommand", "postAttachCommand", "initializeCommand", "userEnvProbe"}, 0},
		{"widening", `{"image":"a","privileged":true,"capAdd":["X"],"securityOpt":["y"],"runArgs":["z"],"mounts":["m"],"workspaceMount":"w","init":true,"appPort":[1]}`, reject.Invalid, []string{"privileged", "capAdd", "securityOpt", "runArgs", "mounts", "workspaceMount", "init", "appPort"}, 0},
		{"build", `{"build":{"dockerfile":"Dockerfile"}}`, reject.Invalid, []string{"build"}, 0},
		{"compose", `{"dockerComposeFile":"c.yml","service":"app","runServices":["db"]}`, reject.Invalid, []string{"dockerComposeFile", "service", "runServices"}, 0},
		{"unknown", `{"image":"a","somethingNew":1}`, reject.UnknownField, []string{"somethingNew"}, 0},
		{"host-variable", `{"image":"a","containerEnv":{"H":"${localEnv:HOME}"}}`, reject.Invalid, []string{"containerEnv.H"}, 0},
		{"host-port", `{"image":"a","forwardPorts":["db:5432"]}`, reject.Invalid, []string{"forwardPorts[0]"}, 0},
		{"no-image", `{"name":"x"}`, reject.MissingField, []string{"image"}, 0},
		{"twice", `{"image":"a","image":"b"}`, reject.DuplicateKey, []string{"image"}, 0},
		{"not-an-object", `["image"]`, reject.Malformed, []string{"devcontainer.json"}, 0},
		{"unterminated-comment", `{"image":"a" /*`, reject.Malformed, []string{"line 1, column 14"}, 0},
		{"nested-twice", `{"image":"a","containerEnv":{"A":"1","A":"2"}}`, reject.DuplicateKey, []string{"containerEnv.A"}, 0},
		{"left-out-twice", `{"image":"a","customizations":{"vscode":{},"vscode":{"x":1}}}`, reject.DuplicateKey, []string{"customizations.vscode"}, 0},
		{"missing-comma", "{\n  \"image\": \"a\"\n  \"name\": \"x\"\n}", reject.Malformed, []string{"line 3, column 3"}, 0},
		{"comma-after-nothing", `{"image":"a","forwardPorts":[,]}`, reject.Malformed, []string{"line 1, column 30"}, 0},
		{"over-1-mib", `{"image":"a"}`, reject.Invalid, []string{"devcontainer.json"}, manifest.MaxSize - len(`{"image":"a"}`) + 1},
	}
	var cases []EnvironmentCase
	for _, p := range pos {
		m, err := manifest.FromDevcontainer([]byte(p.src))
		if err != nil {
			return nil, fmt.Errorf("environment vector %s: %w", p.name, err)
		}
		s, err := manifest.Seal(m, k)
		if err != nil {
			return nil, err
		}
		a := s.Addr
		cases = append(cases, EnvironmentCase{Name: p.name, Devcontainer: p.src, Expect: ExpectOK, Manifest: string(s.Canon), Addr: &a, Pinned: m.Pinned})
	}
	for _, n := range neg {
		c := EnvironmentCase{Name: n.name, Devcontainer: n.src, Expect: string(n.code), Fields: n.fields, Pad: n.pad}
		if err := c.check(k.Public()); err != nil {
			return nil, fmt.Errorf("environment vector %s: %w", n.name, err)
		}
		cases = append(cases, c)
	}
	return jcs.Marshal(Environment{Type: EnvironmentType, Signer: k.Public(), Cases: cases})
}

// check reads a case's devcontainer.json and compares with what it
// states: a positive's manifest, once its signer is the pack's, to the
// byte; a negative's code, and every field it names.
func (c *EnvironmentCase) check(signer key.Public) error {
	m, err := manifest.FromDevcontainer(c.input())
	if c.Expect == ExpectOK {
		if err != nil {
			return fmt.Errorf("want ok, got %w", err)
		}
		m.Signer = signer
		b, err := jcs.Marshal(m)
		switch {
		case err != nil:
			return err
		case string(b) != c.Manifest:
			return fmt.Errorf("manifest %s, want %s", b, c.Manifest)
		case c.Addr == nil || addr.Of(b) != *c.Addr:
			return fmt.Errorf("address %s, want %v", addr.Of(b), c.Addr)
		case m.Pinned != c.Pinned:
			return fmt.Errorf("pinned %v, want %v", m.Pinned, c.Pinned)
		}
		return nil
	}
	var re *reject.Error
	if err == nil || !errors.As(err, &re) || string(re.Code) != c.Expect {
		return fmt.Errorf("want %s, got %v", c.Expect, err)
	}
	for _, f := range c.Fields {
		if !strings.Contains(err.Error(), f+":") && !strings.Contains(err.Error(), f+",") {
			return fmt.Errorf("want %s named, got %v", f, err)
		}
	}
	return nil
}

// CheckEnvironment checks environment.json: every case as it states.
func CheckEnvironment(b []byte) error {
	var e Environment
	if err := jcs.Unmarshal(b, &e); err != nil {
		return err
	}
	if e.Type != EnvironmentType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", e.Type, EnvironmentType)
	}
	var errs []error
	for _, c := range e.Cases {
		if err := c.check(e.Signer); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}
