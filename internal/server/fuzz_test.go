package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
)

// FuzzRequestBody: any body a caller sends is decoded strictly or
// refused as bad input (or over a limit), never a panic, and whatever
// decodes has its grants and tier checked the same way.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"tier":"S1","grants":["cpu:5J","fs:/tmp:rw"],"env":{"A":"b"},"listen":[8000]}`,
		`{"args":["sh","-c","echo"],"stdin":"YWJj","deadline_ms":5}`,
		`{"tier": 1}`, `{"colour":"red"}`, `{`, ``, `{} {}`, `[]`, `null`, `{"grants":["fs:relative:rw"]}`,
		`{"args":"x"}`, `{"stdin":"!!"}`, `{"memory_bytes":1e400}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&client.SandboxSpec{}, &client.ExecSpec{}} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
			err := decode(w, r, v, MaxBody)
			if err != nil {
				if c := errs.Of(err); c != errs.Invalid && c != errs.Limit {
					t.Fatalf("%q: %v is %s, want invalid or limit", body, err, c)
				}
				continue
			}
			switch x := v.(type) {
			case *client.SandboxSpec:
				if _, err := parseGrants(x.Grants); err != nil && errs.Of(err) != errs.Invalid {
					t.Fatalf("grants %q: %v", x.Grants, err)
				}
				if _, err := parseTier(x.Tier, 0); err != nil && errs.Of(err) != errs.Invalid {
					t.Fatalf("tier %q: %v", x.Tier, err)
				}
			}
		}
	})
}
