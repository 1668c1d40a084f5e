package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/server"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/verify"
)

// The objects --json prints. Their schema is docs/cli-json.md: fields
// are added, never renamed or given another meaning, within one
// "schema" number.
const jsonSchema = 1

// runJSON is what `sandbox run --json` prints once the run is over: the
// API's result of a run (package client), the same object.
type runJSON = client.Result

type outcomeJSON = client.Outcome

// sealedJSON describes a sealed run, the exit status sandbox gives and
// whose it is.
func sealedJSON(r *client.Result, code int, from string) runJSON {
	j := *r
	j.ExitStatus, j.ExitFrom = code, from
	return j
}

// failedJSON describes a run sandbox refused, could not start, or could
// not seal.
func failedJSON(err error, code int) runJSON {
	j := runJSON{Schema: jsonSchema, Error: err.Error(), ExitStatus: code, ExitFrom: fromSandbox}
	var ns *host.NotSealedError
	if errors.As(err, &ns) && ns.Result != nil {
		j.Outcome = server.OutcomeOf(ns.Result)
		j.DurationMS = ns.Result.End.Sub(ns.Result.Start).Milliseconds()
		j.Notes = ns.Result.Notes
	}
	return j
}

// printJSON writes v indented, for the listing commands.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// emitRunJSON writes run's object to dest: "-" for stderr, else a file,
// replaced whole.
func emitRunJSON(dest string, stderr io.Writer, v runJSON) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if dest == "-" {
		_, err = stderr.Write(b)
		return err
	}
	return safefile.Write(dest, b, 0o644)
}

// runsJSON is one entry of `sandbox runs --json`.
type runsJSON struct {
	Run      string `json:"run"`
	Tier     string `json:"tier,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Started  string `json:"started,omitempty"` // RFC 3339
	Entry    string `json:"entry,omitempty"`
	Records  string `json:"records"`
	Damaged  string `json:"damaged,omitempty"`
}

func runsOf(runs []host.Summary) []runsJSON {
	out := []runsJSON{}
	for _, r := range runs {
		j := runsJSON{Run: r.ID.String(), Outcome: string(r.Status), ExitCode: r.Exit, Entry: r.Entry, Records: r.Dir, Damaged: r.Damaged}
		if r.ID.IsZero() {
			j.Run = ""
		}
		if r.Status != "" { // the claim was read
			j.Tier = r.Tier.String()
		}
		if !r.Started.IsZero() {
			j.Started = r.Started.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, j)
	}
	return out
}

// writeIDFile writes the run's id, and a newline, to path, replaced whole.
func writeIDFile(path string, r *client.Result) error {
	if path == "" {
		return nil
	}
	return safefile.Write(path, []byte(r.Run+"\n"), 0o644)
}

// showJSON is what `sandbox show --json` prints: the claim's facts and
// the records beside it, decoded. Unit and grants are their files'
// canonical JSON, as stored.
type showJSON struct {
	Schema    int              `json:"schema"`
	Run       string           `json:"run"`
	Records   string           `json:"records"`
	Signer    string           `json:"signer"`
	Started   string           `json:"started"`
	Ended     string           `json:"ended"`
	Outcome   outcomeJSON      `json:"outcome"`
	Tier      tierJSON         `json:"tier"`
	Executor  string           `json:"executor"`
	Notes     []string         `json:"notes,omitempty"`
	Unit      json.RawMessage  `json:"unit,omitempty"`
	Grants    json.RawMessage  `json:"grants,omitempty"`
	Fuel      *uint64          `json:"fuel,omitempty"`
	Energy    []client.Energy  `json:"energy,omitempty"`
	Decisions []grant.Decision `json:"decisions,omitempty"`
	Journal   *journalJSON     `json:"journal,omitempty"`
	Damaged   []damageJSON     `json:"damaged,omitempty"`
}

type tierJSON struct {
	Chosen   string `json:"chosen"`
	Required string `json:"required"`
	Reason   string `json:"reason"`
}

type journalJSON struct {
	Root    string `json:"root"`
	Entries int    `json:"entries"`
}

func showJSONOf(a *attest.Attestation, dir string, damage []damageJSON) showJSON {
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return b
	}
	c := a.Claim
	j := showJSON{Schema: jsonSchema, Run: a.Addr.String(), Records: dir, Signer: c.Signer.String(), Started: c.Started, Ended: c.Ended,
		Outcome:  outcomeJSON{Status: string(c.Outcome.Status), ExitCode: c.Outcome.ExitCode, Detail: c.Outcome.Detail},
		Tier:     tierJSON{Chosen: c.Tier.Chosen.String(), Required: c.Tier.Required.String(), Reason: c.Tier.Reason},
		Executor: c.Executor, Notes: c.Notes, Damaged: damage}
	if b := read(verify.FileUnit); json.Valid(b) {
		j.Unit = b
	}
	if b := read(verify.FileGrants); json.Valid(b) {
		j.Grants = b
	}
	if r, err := receipt.Open(read(verify.FileReceipt), key.NewTrust(c.Signer)); err == nil {
		j.Fuel, j.Energy = r.Fuel, server.EnergyOf(r)
	}
	if l, err := grant.DecodeLog(read(verify.FileDecisions)); err == nil {
		j.Decisions = l.Decisions
	}
	if entries, root, err := journal.Parse(read(verify.FileJournal)); err == nil {
		j.Journal = &journalJSON{Root: root.String(), Entries: len(entries)}
	}
	return j
}

// verifyJSON is one artifact's verdict in `sandbox verify --json`.
type verifyJSON struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	OK      bool   `json:"ok"`
	Address string `json:"address,omitempty"`
	Note    string `json:"note,omitempty"`
	Code    string `json:"code,omitempty"` // docs/spec/conformance.md, on failure
	Error   string `json:"error,omitempty"`
}

func verifyJSONOf(r verify.Result) verifyJSON {
	j := verifyJSON{Path: r.Path, Kind: r.Kind, OK: r.Err == nil, Note: r.Note}
	if !r.Addr.IsZero() {
		j.Address = r.Addr.String()
	}
	if r.Err != nil {
		j.Error = r.Err.Error()
		if c := reject.CodeOf(r.Err); c != "" {
			j.Code = string(c)
		}
	}
	return j
}
