package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Type is a manifest's "manifest".
const Type = "sandbox.manifest/1"

// Manifest is an environment, declared: what a sandbox is made from.
type Manifest struct {
	Type             string            `json:"manifest"`
	Name             string            `json:"name,omitempty"`
	Image            string            `json:"image"`
	Features         []Feature         `json:"features"`
	ContainerEnv     map[string]string `json:"container_env,omitempty"`
	RemoteEnv        map[string]string `json:"remote_env,omitempty"`
	ContainerUser    string            `json:"container_user,omitempty"`
	RemoteUser       string            `json:"remote_user,omitempty"`
	ForwardPorts     []int             `json:"forward_ports,omitempty"`
	WorkspaceFolder  string            `json:"workspace_folder,omitempty"`
	HostRequirements *HostRequirements `json:"host_requirements,omitempty"`
	// Pinned: the image and every feature are addressed by digest.
	Pinned bool `json:"pinned"`
	// Source is the BLAKE3 of the devcontainer.json it was read from.
	Source addr.Addr `json:"source"`
	// Signer is the host that signed it (Seal).
	Signer key.Public `json:"signer"`
}

// Feature is a devcontainer feature and its options, as the strings its
// install script is given.
type Feature struct {
	ID      string            `json:"id"`
	Options map[string]string `json:"options,omitempty"`
}

// HostRequirements are what the environment needs of a host.
type HostRequirements struct {
	CPUs    int    `json:"cpus,omitempty"`
	Memory  string `json:"memory,omitempty"`
	Storage string `json:"storage,omitempty"`
	GPU     string `json:"gpu,omitempty"` // "true", "optional"
}

// The fields of a devcontainer.json and what becomes of each.
var (
	commands = map[string]bool{"postCreateCommand": true, "onCreateCommand": true, "updateContentCommand": true, "postStartCommand": true, "postAttachCommand": true, "initializeCommand": true, "userEnvProbe": true}
	widening = map[string]string{
		"privileged": "runs the container privileged", "capAdd": "adds capabilities", "securityOpt": "changes the security options",
		"runArgs": "passes arguments to the container engine", "mounts": "mounts host paths or volumes", "workspaceMount": "mounts a host path",
		"init": "adds an init the manifest does not name", "appPort": "publishes ports on the host", "build": "builds an image by running commands",
		"dockerComposeFile": "starts services by a compose file", "service": "names a compose service", "runServices": "starts compose services",
	}
	ignored = map[string]bool{"$schema": true, "customizations": true, "portsAttributes": true, "otherPortsAttributes": true, "shutdownAction": true, "overrideCommand": true, "updateRemoteUserUID": true, "waitFor": true}
	taken   = map[string]bool{"name": true, "image": true, "features": true, "containerEnv": true, "remoteEnv": true, "containerUser": true, "remoteUser": true, "forwardPorts": true, "workspaceFolder": true, "hostRequirements": true}
)

// Pinned reports whether ref is addressed by digest: NAME@sha256:HEX,
// the name without '@' or white space, the digest 64 lowercase hex
// digits.
func Pinned(ref string) bool {
	name, digest, ok := strings.Cut(ref, "@sha256:")
	if !ok || name == "" || strings.ContainsAny(name, "@ \t\n\f\r") || len(digest) != 64 {
		return false
	}
	for _, c := range []byte(digest) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// envName reports whether s is a POSIX environment variable's name:
// [A-Za-z_][A-Za-z0-9_]*.
func envName(s string) bool {
	for i, c := range []byte(s) {
		if !letter(c) && c != '_' && (i == 0 || !digit(c)) {
			return false
		}
	}
	return s != ""
}

// userName reports whether s is a user's name: [A-Za-z0-9_][A-Za-z0-9_.-]*.
func userName(s string) bool {
	for i, c := range []byte(s) {
		if !letter(c) && !digit(c) && c != '_' && (i == 0 || c != '.' && c != '-') {
			return false
		}
	}
	return s != ""
}

func letter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }
func digit(c byte) bool  { return c >= '0' && c <= '9' }

// MaxSize bounds a devcontainer.json: 1 MiB, which no real one nears.
// A reader reads at most MaxSize+1 bytes of a file to know it is over.
const MaxSize = 1 << 20

// FromDevcontainer reads a devcontainer.json into a manifest (not yet
// signed). Every field it refuses is named, in the file's order; an
// input over MaxSize is refused whole (invalid), naming the bound.
func FromDevcontainer(b []byte) (Manifest, error) {
	if len(b) > MaxSize {
		return Manifest{}, reject.New(reject.Invalid, "devcontainer.json", "more than %d bytes (1 MiB), the bound on a devcontainer.json", MaxSize)
	}
	std, err := Standard(b)
	if err != nil {
		return Manifest{}, err
	}
	if err := checkJSON(std); err != nil {
		return Manifest{}, err
	}
	fields, err := topLevel(std)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Type: Type, Features: []Feature{}, Source: addr.Of(b)}
	var refused []error
	for _, f := range fields {
		name := f.name
		switch {
		case commands[name]:
			refused = append(refused, reject.New(reject.Invalid, name, "a command: a manifest runs nothing"))
		case widening[name] != "":
			refused = append(refused, reject.New(reject.Invalid, name, "%s: a manifest cannot widen the sandbox or reach the host", widening[name]))
		case ignored[name]:
		case taken[name]:
			if err := m.take(name, f.value); err != nil {
				refused = append(refused, err)
			}
		default:
			refused = append(refused, reject.New(reject.UnknownField, name, "not a field a manifest takes"))
		}
	}
	if len(refused) == 0 && m.Image == "" {
		refused = append(refused, reject.New(reject.MissingField, "image", "a manifest's environment is an image (build and compose files are refused)"))
	}
	if len(refused) > 0 {
		return Manifest{}, errors.Join(refused...)
	}
	sort.Slice(m.Features, func(i, j int) bool { return m.Features[i].ID < m.Features[j].ID })
	m.Pinned = Pinned(m.Image)
	for _, f := range m.Features {
		m.Pinned = m.Pinned && Pinned(f.ID)
	}
	return m, nil
}

type field struct {
	name  string
	value json.RawMessage
}

// topLevel is the file's object's members in order (b is JSON that
// checkJSON took: no member is named twice); anything but one object is
// refused.
func topLevel(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, syntax(b, dec, err)
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, reject.New(reject.Malformed, "devcontainer.json", "not a JSON object")
	}
	var out []field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, syntax(b, dec, err)
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, syntax(b, dec, err)
		}
		out = append(out, field{name, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntax(b, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, at(b, int(dec.InputOffset()), "bytes after the object")
	}
	return out, nil
}

// syntax refuses what encoding/json refused of JSON that checkJSON took,
// which FuzzCheckJSON holds cannot happen: at the decoder's offset,
// which is near the fault, not at it.
func syntax(b []byte, dec *json.Decoder, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return at(b, len(b), "the file ends inside its object")
	}
	return at(b, int(dec.InputOffset()), err.Error())
}

// strict decodes v into out, refusing unknown members and trailing data.
func strict(name string, v json.RawMessage, out any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return reject.New(reject.Invalid, name, "%v", err)
	}
	return nil
}

// plain refuses a value a devcontainer tool would resolve from the host.
func plain(name, s string) error {
	if strings.Contains(s, "${") {
		return reject.New(reject.Invalid, name, "%q holds a ${…} variable, which devcontainer tools resolve from the host", s)
	}
	if strings.ContainsRune(s, 0) {
		return reject.New(reject.Invalid, name, "a NUL byte")
	}
	return nil
}

func (m *Manifest) take(name string, v json.RawMessage) error {
	str := func(out *string) error {
		if err := strict(name, v, out); err != nil {
			return err
		}
		return plain(name, *out)
	}
	switch name {
	case "name":
		return str(&m.Name)
	case "image":
		if err := str(&m.Image); err != nil {
			return err
		}
		if m.Image == "" || strings.ContainsAny(m.Image, " \t\n") {
			return reject.New(reject.Invalid, name, "%q is not an image reference", m.Image)
		}
	case "containerUser", "remoteUser":
		var u string
		if err := str(&u); err != nil {
			return err
		}
		if !userName(u) {
			return reject.New(reject.Invalid, name, "%q is not a user name", u)
		}
		if name == "containerUser" {
			m.ContainerUser = u
		} else {
			m.RemoteUser = u
		}
	case "workspaceFolder":
		if err := str(&m.WorkspaceFolder); err != nil {
			return err
		}
		if !path.IsAbs(m.WorkspaceFolder) || path.Clean(m.WorkspaceFolder) != m.WorkspaceFolder {
			return reject.New(reject.Invalid, name, "%q is not an absolute, clean path", m.WorkspaceFolder)
		}
	case "containerEnv", "remoteEnv":
		var env map[string]string
		if err := strict(name, v, &env); err != nil {
			return err
		}
		for k, val := range env {
			if !envName(k) {
				return reject.New(reject.Invalid, name+"."+k, "not a variable name")
			}
			if err := plain(name+"."+k, val); err != nil {
				return err
			}
		}
		if len(env) > 0 {
			if name == "containerEnv" {
				m.ContainerEnv = env
			} else {
				m.RemoteEnv = env
			}
		}
	case "forwardPorts":
		var ports []json.RawMessage
		if err := strict(name, v, &ports); err != nil {
			return err
		}
		for i, p := range ports {
			var n int
			if err := json.Unmarshal(p, &n); err != nil || n < 1 || n > 65535 {
				return reject.New(reject.Invalid, fmt.Sprintf("%s[%d]", name, i), "%s: a port number (a \"host:port\" forward reaches another service, outside the sandbox)", p)
			}
			m.ForwardPorts = append(m.ForwardPorts, n)
		}
		sort.Ints(m.ForwardPorts)
	case "hostRequirements":
		var h struct {
			CPUs    int             `json:"cpus"`
			Memory  string          `json:"memory"`
			Storage string          `json:"storage"`
			GPU     json.RawMessage `json:"gpu"`
		}
		if err := strict(name, v, &h); err != nil {
			return err
		}
		hr := &HostRequirements{CPUs: h.CPUs, Memory: h.Memory, Storage: h.Storage}
		switch g := strings.TrimSpace(string(h.GPU)); g {
		case "", "false", "null":
		case "true", `"optional"`:
			hr.GPU = strings.Trim(g, `"`)
		default:
			return reject.New(reject.Invalid, name+".gpu", "%s: true, false or \"optional\"", g)
		}
		if hr.CPUs < 0 {
			return reject.New(reject.Invalid, name+".cpus", "a negative count")
		}
		if *hr != (HostRequirements{}) {
			// Requirements of nothing (gpu false, an empty object) are
			// no requirement, and the member is left out.
			m.HostRequirements = hr
		}
	case "features":
		var fs map[string]json.RawMessage
		if err := strict(name, v, &fs); err != nil {
			return err
		}
		for id, opts := range fs {
			where := name + "." + id
			if err := plain(where, id); err != nil {
				return err
			}
			if id == "" || strings.ContainsAny(id, " \t\n") {
				return reject.New(reject.Invalid, where, "not a feature reference")
			}
			f := Feature{ID: id}
			var o map[string]any
			var version string
			switch {
			case json.Unmarshal(opts, &version) == nil:
				if version != "" {
					f.Options = map[string]string{"version": version}
				}
			case json.Unmarshal(opts, &o) == nil:
				for k, val := range o {
					var s string
					switch x := val.(type) {
					case string:
						s = x
					case bool:
						s = fmt.Sprint(x)
					case float64:
						s = strconv.FormatFloat(x, 'f', -1, 64)
					default:
						return reject.New(reject.Invalid, where+"."+k, "an option is a string, a boolean or a number")
					}
					if err := plain(where+"."+k, s); err != nil {
						return err
					}
					if f.Options == nil {
						f.Options = map[string]string{}
					}
					f.Options[k] = s
				}
			default:
				return reject.New(reject.Invalid, where, "a feature's options are an object or a version string")
			}
			m.Features = append(m.Features, f)
		}
	}
	return nil
}

// Signed is a sealed manifest.
type Signed struct {
	Manifest Manifest
	Addr     addr.Addr // BLAKE3 of its canonical bytes: what a sandbox binds
	Canon    []byte
	Envelope []byte // {"manifest":{…},"signature":"…"}
}

type envelope struct {
	Manifest  json.RawMessage `json:"manifest"`
	Signature string          `json:"signature"`
}

// Seal signs m with k (Ed25519 over its canonical JSON). Empty host
// requirements are no requirement: they are left out.
func Seal(m Manifest, k key.Private) (*Signed, error) {
	m.Type, m.Signer = Type, k.Public()
	if m.HostRequirements != nil && *m.HostRequirements == (HostRequirements{}) {
		m.HostRequirements = nil
	}
	if m.Features == nil {
		m.Features = []Feature{}
	}
	c, err := jcs.Marshal(m)
	if err != nil {
		return nil, err
	}
	env, err := jcs.Marshal(envelope{Manifest: c, Signature: base64.RawURLEncoding.EncodeToString(k.Sign(c))})
	if err != nil {
		return nil, err
	}
	return &Signed{Manifest: m, Addr: addr.Of(c), Canon: c, Envelope: env}, nil
}

// Verify checks a sealed manifest: canonical form, its one type, its
// signature, and that its signer is trusted (UntrustedKey otherwise, with
// the manifest).
func Verify(b []byte, trust key.Trust) (*Signed, error) {
	var env envelope
	if err := jcs.Unmarshal(b, &env); err != nil {
		return nil, err
	}
	var m Manifest
	if err := jcs.Unmarshal(env.Manifest, &m); err != nil {
		return nil, reject.In("manifest", err)
	}
	if m.Type != Type {
		return nil, reject.New(reject.Invalid, "manifest.manifest", "%q, not %s", m.Type, Type)
	}
	if m.HostRequirements != nil && *m.HostRequirements == (HostRequirements{}) {
		return nil, reject.New(reject.NonCanonical, "manifest.host_requirements", "an empty object; requirements of nothing are written by leaving the member out")
	}
	sig, err := base64.RawURLEncoding.DecodeString(env.Signature)
	if err != nil || !m.Signer.Verify(env.Manifest, sig) {
		return nil, reject.New(reject.Signature, "signature", "it does not verify under the manifest's signer %s", m.Signer)
	}
	s := &Signed{Manifest: m, Addr: addr.Of(env.Manifest), Canon: env.Manifest, Envelope: b}
	if !trust.Trusts(m.Signer) {
		return s, reject.New(reject.UntrustedKey, "manifest.signer", "%s is not a trusted key", m.Signer)
	}
	return s, nil
}
