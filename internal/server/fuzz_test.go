package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/live"
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
		`{"args":["true"],"limits":{"pids":1,"memory_pages":-1}}` + "\nstdin bytes", `{"args":["true"],"grants_json":{"cpu":[]}}` + "\n",
		`{"args":["x"],"interrupt_key":"0123456789abcdef"}`,
		`{"count":3}`, `{"count":3,"suspended":true}`, `{"count":-1}`, `{"count":1e3}`, `{"count":"2"}`, `{"count":65}`,
		`{"port":8000}`, `{"port":8000,"ttl_seconds":86401}`, `{"port":-1}`, `{"port":8000,"ttl_seconds":1e9}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&client.SandboxSpec{}, &client.ExecSpec{}, &client.ForkSpec{}, &client.PreviewSpec{}} {
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
			case *client.ExecSpec:
				for _, ctype := range []string{"application/json", client.StdinStreamType} {
					r := httptest.NewRequest("POST", "/v1/runs", strings.NewReader(body))
					r.Header.Set("Content-Type", ctype)
					c, err := decodeExec(httptest.NewRecorder(), r)
					if err == nil {
						_, err = limitsOf(c.Limits)
					}
					if err == nil {
						_, err = runGrants(c.ExecSpec)
					}
					if err != nil {
						if k := errs.Of(err); k != errs.Invalid && k != errs.Limit {
							t.Fatalf("%s %q: %v is %s, want invalid or limit", ctype, body, err, k)
						}
					}
				}
			case *client.ForkSpec:
				// POST /v1/sandboxes/{id}/fork: its count is checked
				// before anything is taken.
				err := live.CheckForkCount(x.Count)
				if ok := x.Count >= 1 && x.Count <= live.MaxFork; ok != (err == nil) || err != nil && errs.Of(err) != errs.Invalid {
					t.Fatalf("count %d: %v", x.Count, err)
				}
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
