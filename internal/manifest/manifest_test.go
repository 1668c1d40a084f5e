package manifest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestStandard(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":1,}`, `{"a":1 }`},
		{`{"a":[1,2,],}`, `{"a":[1,2 ] }`},
		{"{\"a\":1, // x\n}", "{\"a\":1      \n}"},
		{`{"a":"//not a comment",}`, `{"a":"//not a comment" }`},
		{`{"a":"a \" /* still a string",}`, `{"a":"a \" /* still a string" }`},
		{`{/* c */"a":1}`, `{       "a":1}`},
		{"{\"a\":1,/* a\nb */}", "{\"a\":1     \n    }"},
		{`{"a":",}"}`, `{"a":",}"}`},
		{`{,}`, `{,}`},
		{`[1,,]`, `[1,,]`},
		{`{"a":,}`, `{"a":,}`},
		{"[ /* c */ ,]", "[         ,]"},
	} {
		got, err := Standard([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`{"a":"open`, `{"a":1 /* open`, `{"a":"x\"} `} {
		if _, err := Standard([]byte(bad)); !errors.Is(err, reject.Malformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The corpus: real devcontainer.json files (testdata/corpus/README.md),
// each taken or refused, naming every refused field.
func TestCorpus(t *testing.T) {
	type taken struct {
		image    string
		features int
		ports    []int
	}
	for name, want := range map[string]struct {
		refused []string // each named; nil: taken
		taken   taken
	}{
		"bustub.json":                 {refused: []string{"runArgs", "postCreateCommand"}},
		"streamlit-genai.json":        {refused: []string{"updateContentCommand", "postAttachCommand"}},
		"gorelo-haloapi-relay.json":   {refused: []string{"postCreateCommand"}},
		"gnet-tls-examples.json":      {refused: []string{"context", "dockerComposeFile", "service", "extensions"}},
		"nuxt-java-practice.json":     {refused: []string{"dockerComposeFile", "service"}},
		"node-express-postgres.json":  {refused: []string{"dockerComposeFile", "service", "workspaceFolder", "postCreateCommand"}},
		"distributed-systems.json":    {refused: []string{"build", "postCreateCommand"}},
		"study-haskell.json":          {refused: []string{"build"}},
		"windows-compose.json":        {refused: []string{"service", "dockerComposeFile"}},
		"try-dotnet-10.json":          {taken: taken{image: "mcr.microsoft.com/dotnet/nightly/sdk:10.0.100-preview.3"}},
		"mit-6.5840.json":             {taken: taken{image: "mcr.microsoft.com/devcontainers/go:dev-1.22-bookworm", ports: []int{8080}}},
		"terraform-zero-to-hero.json": {taken: taken{image: "mcr.microsoft.com/devcontainers/universal:2", features: 2}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		m, err := FromDevcontainer(b)
		if want.refused == nil {
			if err != nil || m.Image != want.taken.image || m.Pinned || len(m.Features) != want.taken.features || fmt.Sprint(m.ForwardPorts) != fmt.Sprint(want.taken.ports) && len(want.taken.ports) > 0 {
				t.Errorf("%s: %+v %v", name, m, err)
			}
			continue
		}
		for _, f := range want.refused {
			if err == nil || !strings.Contains(err.Error(), f+":") {
				t.Errorf("%s: %v does not name %s", name, err, f)
			}
		}
	}
	// Every file of the corpus is in the table.
	ents, _ := os.ReadDir(filepath.Join("testdata", "corpus"))
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	if n != 12 {
		t.Errorf("%d files in the corpus, 12 in the table", n)
	}
}

func TestTakes(t *testing.T) {
	src := `{
		// a comment, and trailing commas, as VS Code accepts them
		"name": "dev",
		"image": "mcr.microsoft.com/devcontainers/go` + digest + `",
		"features": {
			"ghcr.io/devcontainers/features/node` + digest + `": {"version": "20", "nvm": true, "n": 18,},
			"ghcr.io/x/y` + digest + `": "1.2",
		},
		"containerEnv": {"GOFLAGS": "-mod=mod"},
		"remoteEnv": {"PATH_EXTRA": "/opt/bin"},
		"remoteUser": "vscode",
		"forwardPorts": [8080, 3000],
		"workspaceFolder": "/workspaces/app",
		"hostRequirements": {"cpus": 4, "memory": "8gb", "gpu": "optional"},
		"customizations": {"vscode": {"extensions": ["golang.go"]}},
		"portsAttributes": {"8080": {"label": "web"}},
	}`
	m, err := FromDevcontainer([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Pinned || len(m.Features) != 2 || m.Features[0].Options["nvm"] != "true" || m.Features[0].Options["n"] != "18" || m.Features[1].Options["version"] != "1.2" {
		t.Fatalf("%+v", m)
	}
	if m.ForwardPorts[0] != 3000 || m.HostRequirements.GPU != "optional" || m.ContainerEnv["GOFLAGS"] != "-mod=mod" {
		t.Fatalf("%+v", m)
	}
	// Comments, layout and member order do not change the manifest
	// (only its source address, which is the file's).
	other := strings.ReplaceAll(strings.ReplaceAll(src, "\t", "  "), "// a comment, and trailing commas, as VS Code accepts them", "/* another */")
	m2, err := FromDevcontainer([]byte(other))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := key.Generate(rand.Reader)
	a, _ := Seal(m, k)
	m2.Source = m.Source
	b, _ := Seal(m2, k)
	if a.Addr != b.Addr {
		t.Fatal("the same declarations made two manifests")
	}
	// One feature not by digest: not pinned.
	m3, _ := FromDevcontainer([]byte(strings.Replace(src, "ghcr.io/x/y"+digest, "ghcr.io/x/y:1", 1)))
	if m3.Pinned {
		t.Fatal("a feature by tag, and pinned")
	}
	m4, _ := FromDevcontainer([]byte(strings.Replace(src, "go"+digest, "go:1", 1)))
	if m4.Pinned {
		t.Fatal("an image by tag, and pinned")
	}
}

func TestRefuses(t *testing.T) {
	for _, c := range []struct{ src, field string }{
		{`{"image":"a","postCreateCommand":"x"}`, "postCreateCommand"},
		{`{"image":"a","onCreateCommand":["x"]}`, "onCreateCommand"},
		{`{"image":"a","updateContentCommand":"x"}`, "updateContentCommand"},
		{`{"image":"a","postStartCommand":"x"}`, "postStartCommand"},
		{`{"image":"a","postAttachCommand":"x"}`, "postAttachCommand"},
		{`{"image":"a","initializeCommand":"x"}`, "initializeCommand"},
		{`{"image":"a","privileged":true}`, "privileged"},
		{`{"image":"a","capAdd":["SYS_ADMIN"]}`, "capAdd"},
		{`{"image":"a","securityOpt":["seccomp=unconfined"]}`, "securityOpt"},
		{`{"image":"a","runArgs":["--network=host"]}`, "runArgs"},
		{`{"image":"a","mounts":["source=/,target=/host,type=bind"]}`, "mounts"},
		{`{"image":"a","workspaceMount":"source=/,target=/w,type=bind"}`, "workspaceMount"},
		{`{"image":"a","init":true}`, "init"},
		{`{"image":"a","appPort":[80]}`, "appPort"},
		{`{"build":{"dockerfile":"Dockerfile"}}`, "build"},
		{`{"dockerComposeFile":"c.yml","service":"app"}`, "dockerComposeFile"},
		{`{"image":"a","somethingNew":1}`, "somethingNew"},
		{`{"image":"a","forwardPorts":["db:5432"]}`, "forwardPorts[0]"},
		{`{"image":"a","forwardPorts":[70000]}`, "forwardPorts[0]"},
		{`{"image":"a","containerEnv":{"HOME_DIR":"${localEnv:HOME}"}}`, "containerEnv.HOME_DIR"},
		{`{"image":"a","containerEnv":{"BAD-NAME":"x"}}`, "containerEnv.BAD-NAME"},
		{`{"image":"a","remoteUser":"root; rm"}`, "remoteUser"},
		{`{"image":"a","workspaceFolder":"rel/path"}`, "workspaceFolder"},
		{`{"image":"a","features":{"ghcr.io/f:1":{"o":["list"]}}}`, "features.ghcr.io/f:1.o"},
		{`{"image":"a","hostRequirements":{"cpus":2,"fpga":true}}`, "hostRequirements"},
		{`{"image":"a","image":"b"}`, "image"},
		{`{"name":"no image"}`, "image"},
		{`{"image":"a"} {}`, "line 1, column 15"},
		{`["image"]`, "devcontainer.json"},
		{`{"image":"a",`, "line 1, column 14"},
	} {
		_, err := FromDevcontainer([]byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%s: %v (want it to name %s)", c.src, err, c.field)
		}
	}
}

// A member named twice is refused wherever it is, by its path: a reader
// that kept the last would sign what another reader reads otherwise.
func TestDuplicateKeysAtAnyDepth(t *testing.T) {
	for _, c := range []struct{ src, field string }{
		{`{"image":"a","image":"b"}`, "image"},
		{`{"image":"a","containerEnv":{"A":"1","A":"2"}}`, "containerEnv.A"},
		{`{"image":"a","remoteEnv":{"A":"1","\u0041":"2"}}`, "remoteEnv.A"},
		{`{"image":"a","hostRequirements":{"gpu":true,"gpu":false}}`, "hostRequirements.gpu"},
		{`{"image":"a","features":{"ghcr.io/f:1":{"version":"1","version":"2"}}}`, "features.ghcr.io/f:1.version"},
		{`{"image":"a","features":{"x":"1","x":"2"}}`, "features.x"},
		{`{"image":"a","customizations":{"vscode":{"settings":[{"a":1,"a":2}]}}}`, "customizations.vscode.settings[0].a"},
	} {
		_, err := FromDevcontainer([]byte(c.src))
		if !errors.Is(err, reject.DuplicateKey) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%s: %v (want duplicate-key naming %s)", c.src, err, c.field)
		}
	}
}

// A syntax error is refused at the line and column (1-based, in bytes)
// of the byte at fault.
func TestSyntaxErrorPositions(t *testing.T) {
	for _, c := range []struct{ src, at string }{
		{`{"image":x}`, "line 1, column 10"},
		{`{"image" "a"}`, "line 1, column 10"},
		{`{"image":"a",,}`, "line 1, column 14"},
		{"{\n  \"image\": tru}", "line 2, column 15"},
		{"{\n\t\"image\": \"a\"\n\t\"name\": \"b\"}", "line 3, column 2"},
		{`{"image":"a"} x`, "line 1, column 15"},
		{`{"image":"a"}}`, "line 1, column 14"},
		{`{"image":"a\q"}`, "line 1, column 13"},
		{`{,"image":"a"}`, "line 1, column 2"},
		{`{"image":"a","f":[,]}`, "line 1, column 19"},
		{"{\"image\":\"a\x01\"}", "line 1, column 12"},
		{`{"image":01}`, "line 1, column 11"},
		{`{"image":-}`, "line 1, column 11"},
		{`{"image":1.}`, "line 1, column 12"},
		{`{"image":"a",`, "line 1, column 14"},
		{`data`, "line 1, column 1"},
		{`{"a":[1 2]}`, "line 1, column 9"},
	} {
		_, err := FromDevcontainer([]byte(c.src))
		if !errors.Is(err, reject.Malformed) || !strings.Contains(err.Error(), c.at+":") {
			t.Errorf("%q: %v (want malformed at %s)", c.src, err, c.at)
		}
	}
}

// hostRequirements that require nothing (gpu false, or empty) are no
// requirement: the manifest leaves the member out, as the canonical
// profile leaves out what is empty, and a sealed one with it empty is
// refused.
func TestNoRequirementIsLeftOut(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	plain, _ := FromDevcontainer([]byte(`{"image":"a"}`))
	ps, _ := Seal(plain, k)
	for _, src := range []string{`{"image":"a","hostRequirements":{"gpu":false}}`, `{"image":"a","hostRequirements":{}}`, `{"image":"a","hostRequirements":{"gpu":null,"cpus":0}}`} {
		m, err := FromDevcontainer([]byte(src))
		if err != nil || m.HostRequirements != nil {
			t.Errorf("%s: %+v %v", src, m.HostRequirements, err)
			continue
		}
		m.Source = plain.Source
		s, _ := Seal(m, k)
		if s.Addr != ps.Addr {
			t.Errorf("%s: a manifest other than the one without it: %s", src, s.Canon)
		}
	}
	m, _ := FromDevcontainer([]byte(`{"image":"a","hostRequirements":{"gpu":true}}`))
	if m.HostRequirements == nil || m.HostRequirements.GPU != "true" {
		t.Fatalf("gpu true: %+v", m.HostRequirements)
	}
	empty := plain
	empty.HostRequirements = &HostRequirements{}
	if s, err := Seal(empty, k); err != nil || s.Addr != ps.Addr {
		t.Fatalf("sealing empty host_requirements: %v", err)
	}
	c := bytes.Replace(ps.Canon, []byte(`"features":[],`), []byte(`"features":[],"host_requirements":{},`), 1)
	env := []byte(`{"manifest":` + string(c) + `,"signature":"` + base64.RawURLEncoding.EncodeToString(k.Sign(c)) + `"}`)
	if _, err := Verify(env, key.NewTrust(k.Public())); !errors.Is(err, reject.NonCanonical) {
		t.Fatalf("a manifest signed with empty host_requirements: %v", err)
	}
}

// The input is bounded: over MaxSize it is refused, naming the bound,
// before anything of it is read.
func TestSizeBound(t *testing.T) {
	ok := append([]byte(`{"image":"a"}`), bytes.Repeat([]byte(" "), MaxSize-13)...)
	if _, err := FromDevcontainer(ok); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	_, err := FromDevcontainer(append(ok, ' '))
	if !errors.Is(err, reject.Invalid) || !strings.Contains(err.Error(), fmt.Sprintf("more than %d bytes", MaxSize)) {
		t.Fatalf("over the bound: %v", err)
	}
}

func TestSealVerify(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	m, err := FromDevcontainer([]byte(`{"image":"debian` + digest + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Seal(m, k)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Verify(s.Envelope, key.NewTrust(k.Public()))
	if err != nil || v.Addr != s.Addr || !v.Manifest.Pinned {
		t.Fatalf("%+v %v", v, err)
	}
	if _, err := Verify(s.Envelope, key.Trust{}); !errors.Is(err, reject.UntrustedKey) {
		t.Fatalf("untrusted: %v", err)
	}
	bad := bytes.Replace(s.Envelope, []byte(`"pinned":true`), []byte(`"pinned":false`), 1)
	if _, err := Verify(bad, key.NewTrust(k.Public())); !errors.Is(err, reject.Signature) {
		t.Fatalf("a changed manifest: %v", err)
	}
}

// A devcontainer.json is a stranger's file: FromDevcontainer never
// panics, and what it takes has an image and names no host variable.
func FuzzFromDevcontainer(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "corpus"))
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("testdata", "corpus", e.Name())); err == nil && strings.HasSuffix(e.Name(), ".json") {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"image":"a","features":{"x":{"a":1,"b":true}},"forwardPorts":[1,],}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := FromDevcontainer(b)
		if err != nil {
			return
		}
		if m.Image == "" || strings.Contains(m.Image, "${") {
			t.Fatalf("took %+v", m)
		}
		k, _ := key.Generate(bytes.NewReader(make([]byte, 64)))
		if _, err := Seal(m, k); err != nil {
			t.Fatalf("took what it cannot seal: %v", err)
		}
	})
}

// checkJSON agrees with encoding/json on what is JSON, refuses a
// member named twice anywhere, and places every refusal inside the
// input.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":{"b":1,"b":2}}`, `[1,2.5e-3,"x\u0041",true,false,null]`, `{"a":"\q"}`, `{"a":01}`, "{\"a\":\"\x01\"}", `[[[`, `{"a" 1}`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := checkJSON(b)
		valid := json.Valid(b)
		var re *reject.Error
		switch {
		case err == nil && !valid:
			t.Fatalf("%q: taken, and encoding/json refuses it", b)
		case err != nil && !errors.As(err, &re):
			t.Fatalf("%q: %v is not a reject error", b, err)
		case err != nil && valid && re.Code != reject.DuplicateKey:
			t.Fatalf("%q: JSON, refused as %v", b, err)
		case err != nil && !valid && re.Code != reject.Malformed:
			t.Fatalf("%q: not JSON, refused as %v", b, err)
		}
		if err != nil && re.Code == reject.Malformed {
			var line, col int
			if _, serr := fmt.Sscanf(re.Where, "line %d, column %d", &line, &col); serr != nil || line < 1 || col < 1 || line > bytes.Count(b, []byte("\n"))+1 || col > len(b)+1 {
				t.Fatalf("%q: refused at %q, outside the input", b, re.Where)
			}
		}
	})
}
