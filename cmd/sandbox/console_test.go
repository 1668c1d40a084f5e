package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
)

// The web console (`serve --ui`, docs/console.md) in a real headless
// chromium: a real service with sandboxes, runs, a suspended and resumed
// record and a fleet made through the API by one token (and a sandbox
// by another); the page loaded with the token, clicked through, and what
// it shows held to what the API says, a screenshot's pixels included;
// its in-browser verification passing on what the host sealed and
// failing, saying why, on a tampered receipt and a tampered checkpoint;
// and without a token, or with a wrong one, nothing of any sandbox.
func TestConsoleInBrowser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	chromiumBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	home := t.TempDir()
	certFile, keyFile, pool := selfSigned(t)
	const tokA, tokB = "console-token-aaaaaaaaaaaa", "console-token-bbbbbbbbbbbb"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(tokA+"\n"+tokB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	startServeWith(t, home, nil, "--listen", listen, "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokens, "--ui")
	base := "https://" + listen
	tlsConf := &tls.Config{RootCAs: pool}
	var a, b *client.Client
	for _, x := range []struct {
		c   **client.Client
		tok string
	}{{&a, tokA}, {&b, tokB}} {
		if *x.c, err = client.Dial(base, client.Options{Token: x.tok, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext}); err != nil {
			t.Fatal(err)
		}
	}
	// The service listens on TCP a moment after its socket.
	for i := 0; ; i++ {
		if err := a.Health(ctx); err == nil {
			break
		} else if i > 100 {
			t.Fatalf("the service does not answer on %s: %v", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What A makes through the API.
	sb1, err := a.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"/bin/echo", "made through the API"}, {"sh", "-c", "echo oops >&2; exit 3"}} {
		if _, err := a.Exec(ctx, sb1.ID, client.ExecSpec{Args: args}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	sb2, err := a.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	mustExec := func(id string) {
		if _, err := a.Exec(ctx, id, client.ExecSpec{Args: []string{"true"}}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(sb2.ID)
	if _, err := a.Suspend(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // some idle time, for the resumption to carry
	if _, err := a.Resume(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	mustExec(sb2.ID)
	sb3, err := a.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Suspend(ctx, sb3.ID); err != nil {
		t.Fatal(err)
	}
	oneShot, err := a.Run(ctx, client.ExecSpec{Args: []string{"/bin/echo", "one-shot"}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := a.Fleet(ctx, client.FleetSpec{Args: []string{"/bin/echo"}, Inputs: []string{"a", "b", "c", "d", "e"}, Workers: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// And B's sandbox, which A's console must never show.
	sbB, err := b.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}

	br := newBrowser(t, certFile, 1280, 900)
	noErrors := func(when string) {
		t.Helper()
		if errs := br.pageErrors(); len(errs) > 0 {
			t.Fatalf("%s, the page threw or logged errors:\n%s", when, strings.Join(errs, "\n"))
		}
	}

	t.Run("BLAKE3 vectors in the browser", func(t *testing.T) {
		br.navigate(base + "/ui/")
		vb, err := os.ReadFile("../../testdata/vectors/blake3/test_vectors.json")
		if err != nil {
			t.Fatal(err)
		}
		var bad []string
		br.must(fmt.Sprintf(`import("/ui/verify.js").then((V) => (%s).cases.flatMap((c) => {
			const b = new Uint8Array(c.input_len); for (let i = 0; i < b.length; i++) b[i] = i %% 251;
			const got = V.hex(V.blake3(b));
			return got === c.hash.slice(0, 64) ? [] : [c.input_len + ": " + got];
		}))`, vb), &bad)
		if len(bad) > 0 {
			t.Fatalf("the page's BLAKE3 differs from the official vectors: %v", bad)
		}
	})

	// Loaded with A's token in the fragment.
	br.open(base + "/ui/#token=" + tokA)
	br.waitFor(`document.querySelectorAll("tr[data-sandbox]").length === 3`, 30*time.Second)
	noErrors("loading the sandboxes")
	var href, kept string
	br.must(`location.href`, &href)
	br.must(`sessionStorage.getItem("sandbox.console.token")`, &kept)
	if strings.Contains(href, tokA) || kept != tokA {
		t.Fatalf("the token: the address is %q (it must be gone from it), the tab keeps %q", href, kept)
	}
	apiList, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var shown []struct{ ID, State, Tier, Execs string }
	br.must(`[...document.querySelectorAll("tr[data-sandbox]")].map((tr) => ({ID: tr.dataset.sandbox,
		State: tr.querySelector("[data-state]").textContent, Tier: tr.children[2].textContent, Execs: tr.children[3].textContent}))`, &shown)
	if len(shown) != len(apiList) {
		t.Fatalf("the page lists %d sandboxes, the API %d: %+v", len(shown), len(apiList), shown)
	}
	for _, s := range apiList {
		i := slices.IndexFunc(shown, func(x struct{ ID, State, Tier, Execs string }) bool { return x.ID == s.ID })
		if i < 0 || shown[i].State != s.State || shown[i].Tier != s.Tier || shown[i].Execs != fmt.Sprint(s.Execs) {
			t.Fatalf("sandbox %s: the API says %s %s %d execs; the page %+v", s.ID, s.State, s.Tier, s.Execs, shown)
		}
	}
	if body := bodyText(br); strings.Contains(body, sbB.ID) {
		t.Fatalf("A's console shows B's sandbox %s", sbB.ID)
	}

	t.Run("screenshot", func(t *testing.T) {
		shot := br.screenshot()
		img := decodePNG(t, shot, 1280, 900)
		saveShot(t, "sandboxes.png", shot)
		// Each sandbox's state badge is drawn in its state's colour
		// where the page says it is, and says what the API says.
		want := map[string]color.RGBA{"live": {0x1a, 0x7f, 0x37, 255}, "suspended": {0x9a, 0x67, 0x00, 255}}
		for _, s := range apiList {
			r := br.rect(fmt.Sprintf(`tr[data-sandbox=%q] [data-state]`, s.ID))
			if r.Y < 0 || r.Y+r.H > 900 {
				t.Fatalf("sandbox %s's state is not in view: %+v", s.ID, r)
			}
			got := img.At(int(r.X)+3, int(r.Y+r.H/2))
			if !near(got, want[s.State]) {
				t.Fatalf("sandbox %s (%s): the badge's pixel is %v, want %v", s.ID, s.State, got, want[s.State])
			}
		}
	})

	t.Run("exec in the terminal", func(t *testing.T) {
		br.click(fmt.Sprintf(`tr[data-sandbox=%q] a`, sb1.ID))
		br.waitFor(`document.querySelector("#cmd") && document.activeElement === document.querySelector("#cmd")`, 20*time.Second)
		br.typeText(`sh -c 'echo "from the console"; echo to-stderr >&2'`)
		br.click("#run-cmd")
		br.waitFor(`document.querySelector("#screen .result")`, 60*time.Second)
		screen := br.text("#screen")
		if !strings.Contains(screen, "from the console\n") || !strings.Contains(screen, "to-stderr\n") {
			t.Fatalf("the terminal shows %q", screen)
		}
		var run string
		br.must(`document.querySelector("#screen .result").dataset.run`, &run)
		rep, err := a.RunReport(ctx, run)
		if err != nil || !rep.Verified || rep.Outcome.Status != "exited" || *rep.Outcome.ExitCode != 0 {
			t.Fatalf("the run the terminal names, %s, as the API reports it: %+v %v", run, rep, err)
		}
		if !strings.Contains(screen, "[exited 0 ·") {
			t.Fatalf("the terminal's summary: %q", screen)
		}
		noErrors("an exec")

		t.Run("its run, verified in the browser", func(t *testing.T) {
			br.click("#screen .result a")
			br.waitFor(`document.querySelector("#run-verdict")`, 60*time.Second)
			checkRunPage(t, br, rep, "ok")
			noErrors("verifying a run")
		})

		t.Run("interrupted, still sealed", func(t *testing.T) {
			br.open(base + "/ui/#/sandboxes/" + sb1.ID)
			br.waitFor(`document.querySelector("#cmd") && document.activeElement === document.querySelector("#cmd")`, 20*time.Second)
			br.typeText("sleep 60")
			br.click("#run-cmd")
			br.waitFor(`!document.querySelector("#stop-cmd").disabled`, 20*time.Second)
			start := time.Now()
			br.click("#stop-cmd")
			br.waitFor(`document.querySelector("#screen .result")`, 30*time.Second)
			var run string
			br.must(`document.querySelector("#screen .result").dataset.run`, &run)
			rep, err := a.RunReport(ctx, run)
			if err != nil || rep.Outcome.Status != "killed" || time.Since(start) > 20*time.Second {
				t.Fatalf("the interrupted exec's run %s: %+v %v (after %s)", run, rep, err, time.Since(start))
			}
			if screen := br.text("#screen"); !strings.Contains(screen, "[killed ·") {
				t.Fatalf("the terminal says %q", screen)
			}
			br.click(`#screen .result a`)
			br.waitFor(`document.querySelector("#run-verdict")`, 60*time.Second)
			checkRunPage(t, br, rep, "ok")
			noErrors("an interrupted exec")
		})
	})

	t.Run("runs and the energy chart", func(t *testing.T) {
		br.click(`nav a[data-nav="runs"]`)
		br.waitFor(`document.querySelector("#energy-chart") && document.querySelector("tr[data-run]")`, 60*time.Second)
		var rows []string
		br.must(`[...document.querySelectorAll("tr[data-run]")].map((tr) => tr.dataset.run)`, &rows)
		// Every run A made through the service is there: its execs (its
		// records cite them) and its one-shot run.
		var want []string
		recs, err := a.Records(ctx)
		if err != nil {
			t.Fatal(err)
		}
		execs := 0
		for _, r := range recs {
			execs += r.Executed
		}
		if len(rows) != execs+1 || !slices.Contains(rows, oneShot.Run) {
			t.Fatalf("the page lists %d runs (%v); A's records cite %d and it made one one-shot run %s", len(rows), rows, execs, oneShot.Run)
		}
		want = rows
		type point struct {
			Run, Class string
			UJ         uint64
		}
		var pts []point
		br.must(`[...document.querySelectorAll("#energy-chart circle.point")].map((c) => ({Run: c.dataset.run, Class: c.dataset.class, UJ: Number(c.dataset.uj)}))`, &pts)
		sums := map[string]uint64{}
		npts := 0
		for _, id := range want {
			rep, err := a.RunReport(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rep.Energy {
				npts++
				sums[e.Class] += e.MeasuredUJ + e.EstimatedUJ
				if !slices.Contains(pts, point{id, e.Class, e.MeasuredUJ + e.EstimatedUJ}) {
					t.Fatalf("run %s: the API's %s energy %d µJ is not a point of the chart %+v", id, e.Class, e.MeasuredUJ+e.EstimatedUJ, pts)
				}
			}
		}
		if len(pts) != npts {
			t.Fatalf("the chart has %d points, the API's runs %d class figures", len(pts), npts)
		}
		var legend map[string]uint64
		br.must(`Object.fromEntries([...document.querySelectorAll("#energy-chart text.legend")].map((x) => [x.dataset.class, Number(x.dataset.uj)]))`, &legend)
		if fmt.Sprint(legend) != fmt.Sprint(sums) {
			t.Fatalf("the chart's totals per class %v, the API's receipts %v", legend, sums)
		}
		saveShot(t, "runs.png", br.screenshot())
		noErrors("the runs")
	})

	t.Run("a record's chain of segments", func(t *testing.T) {
		clickThrough(br, "records", fmt.Sprintf(`tr[data-record=%q] a`, sb2.ID), "#record-verdict")
		var verdict string
		br.must(`document.querySelector("#record-verdict").dataset.verdict`, &verdict)
		if verdict != "ok" {
			t.Fatalf("the record's checks: %s", br.text("#record-checks"))
		}
		var kinds []string
		br.must(`[...document.querySelectorAll("#record-chain .seg")].map((s) => s.dataset.kind)`, &kinds)
		if strings.Join(kinds, " ") != "genesis executed suspended resumed executed" {
			t.Fatalf("the chain drawn: %v", kinds)
		}
		recs, err := a.Records(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(recs, func(r client.Record) bool { return r.ID == sb2.ID })
		var idle uint64
		br.must(`[...document.querySelectorAll("#record-chain .idle")].reduce((s, x) => s + Number(x.dataset.uj), 0)`, &idle)
		if i < 0 || idle != recs[i].IdleUJ {
			t.Fatalf("the chain's idle energy %d µJ, the API's record %+v", idle, recs)
		}
		// Each executed segment's energy is its run's, as the API reports it.
		br.waitFor(`[...document.querySelectorAll("#record-chain .seg-executed .energy")].every((x) => x.dataset.uj !== undefined)`, 30*time.Second)
		var segs []struct {
			Run string
			UJ  uint64
		}
		br.must(`[...document.querySelectorAll("#record-chain .seg-executed")].map((s) => ({Run: decodeURIComponent(s.querySelector(".run-link").getAttribute("href").slice(7)), UJ: Number(s.querySelector(".energy").dataset.uj)}))`, &segs)
		var active uint64
		for _, s := range segs {
			rep, err := a.RunReport(ctx, s.Run)
			if err != nil {
				t.Fatal(err)
			}
			var uj uint64
			for _, e := range rep.Energy {
				uj += e.MeasuredUJ + e.EstimatedUJ
			}
			if uj != s.UJ {
				t.Fatalf("segment of run %s: the page says %d µJ, the API %d", s.Run, s.UJ, uj)
			}
			active += uj
		}
		if active != recs[i].ActiveUJ {
			t.Fatalf("the executed segments sum to %d µJ, the API's record says %d", active, recs[i].ActiveUJ)
		}
		saveShot(t, "record.png", br.screenshot())
		noErrors("a record")
	})

	t.Run("a fleet item's inclusion proof", func(t *testing.T) {
		clickThrough(br, "fleets", fmt.Sprintf(`tr[data-fleet=%q] a`, fl.ID), "#item-input")
		br.must(`document.querySelector("#item-input").value = "3"`, nil)
		br.click("#check-item")
		br.waitFor(`document.querySelector("#fleet-verdict")`, 30*time.Second)
		var verdict, run string
		br.must(`document.querySelector("#fleet-verdict").dataset.verdict`, &verdict)
		br.must(`document.querySelector("#fleet-item").dataset.run`, &run)
		if verdict != "ok" {
			t.Fatalf("item 3's inclusion: %s", br.text("#fleet-checks"))
		}
		// The item is the one the CLI proves, in the checkpoint the API
		// answered the fleet with.
		out, e, code := runCLI(t, home, "", "fleet", "prove", fl.ID, "3")
		var proof struct {
			Item struct{ Run string }
			Size int
		}
		if code != 0 || json.Unmarshal([]byte(out), &proof) != nil || proof.Item.Run != run || proof.Size != 5 {
			t.Fatalf("sandbox fleet prove: %d %s %s; the page's item names run %s", code, out, e, run)
		}
		if got := br.text("#fleet-checkpoint"); got != fl.Checkpoint {
			t.Fatalf("the page's checkpoint %q, the API's %q", got, fl.Checkpoint)
		}
		noErrors("a fleet")

		t.Run("a tampered checkpoint fails", func(t *testing.T) {
			cp := filepath.Join(home, "fleets", fl.ID, "checkpoint")
			orig, err := os.ReadFile(cp)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.SplitN(string(orig), "\n", 4)
			if lines[1] != "5" {
				t.Fatalf("checkpoint: %q", orig)
			}
			lines[1] = "6" // a bigger tree, the signature left as it was
			if err := os.WriteFile(cp, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
				t.Fatal(err)
			}
			br.open(base + "/ui/#/fleets/" + fl.ID + "/3")
			br.waitFor(`document.querySelector("#fleet-verdict")`, 30*time.Second)
			checkFailed(t, br, "#fleet-verdict", "#fleet-checks", "checkpoint: signed note by the host's key", "does not verify")
			os.WriteFile(cp, orig, 0o600)
		})
	})

	t.Run("a tampered receipt fails", func(t *testing.T) {
		hex := strings.TrimPrefix(oneShot.Run, "b3:")
		rc := filepath.Join(home, "runs", hex, "receipt.cose")
		orig, err := os.ReadFile(rc)
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(orig)
		bad[len(bad)-1] ^= 0x01 // the last byte of its signature
		if err := os.WriteFile(rc, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(rc, orig, 0o600)
		rep, err := a.RunReport(ctx, oneShot.Run)
		if err != nil || rep.Verified {
			t.Fatalf("the API's report of the tampered run: %+v %v", rep, err)
		}
		br.open(base + "/ui/#/runs/" + oneShot.Run)
		br.waitFor(`document.querySelector("#run-verdict")`, 60*time.Second)
		checkFailed(t, br, "#run-verdict", "#run-checks", "receipt.cose: bound by address", "hashes to")
		if got := br.text("#service-verdict"); !strings.HasPrefix(got, "not verified") {
			t.Fatalf("the page shows the service's word as %q; the API says not verified", got)
		}
		// The FAIL is drawn in red, where the page says it is.
		r := br.rect(`#run-checks li[data-state="fail"] .badge`) // scrolled into view
		shot := br.screenshot()
		img := decodePNG(t, shot, 1280, 900)
		saveShot(t, "tampered.png", shot)
		if got := img.At(int(r.X)+3, int(r.Y+r.H/2)); !near(got, color.RGBA{0xcf, 0x22, 0x2e, 255}) {
			t.Fatalf("the FAIL badge's pixel is %v, want red", got)
		}
	})

	t.Run("a wrong token shows nothing", func(t *testing.T) {
		br.open(base + "/ui/#token=console-token-wrong-wrong-wrong")
		br.waitFor(`document.querySelector("#login-error")`, 30*time.Second)
		if got := br.text("#login-error"); !strings.Contains(got, "401") {
			t.Fatalf("the page says %q", got)
		}
		nothingShown(t, br, []string{sb1.ID, sb2.ID, sb3.ID, sbB.ID, oneShot.Run})
		var kept *string
		br.must(`sessionStorage.getItem("sandbox.console.token")`, &kept)
		if kept != nil {
			t.Fatalf("a refused token is kept: %q", *kept)
		}
		br.pageErrors() // the refused calls' 401s are logged by the browser
	})

	t.Run("no token shows nothing", func(t *testing.T) {
		br.must(`sessionStorage.clear()`, nil)
		br.open(base + "/ui/#/sandboxes")
		br.waitFor(`document.querySelector("#login")`, 30*time.Second)
		nothingShown(t, br, []string{sb1.ID, sb2.ID, sb3.ID, sbB.ID, oneShot.Run})
		noErrors("without a token")
		// And a token pasted in opens it.
		br.click("#token-input")
		br.typeText(tokB)
		br.click(`#login button[type="submit"]`)
		br.waitFor(`document.querySelectorAll("tr[data-sandbox]").length === 1`, 30*time.Second)
		var id string
		br.must(`document.querySelector("tr[data-sandbox]").dataset.sandbox`, &id)
		if id != sbB.ID {
			t.Fatalf("B's console lists %s, want its own %s", id, sbB.ID)
		}
		noErrors("with a pasted token")
	})
}

// clickThrough clicks the tab nav, then row (once it is listed), and
// waits for the page's element then.
func clickThrough(br *browser, nav, row, then string) {
	br.t.Helper()
	br.click(fmt.Sprintf(`nav a[data-nav=%q]`, nav))
	br.waitFor(fmt.Sprintf(`document.querySelector(%q)`, row), 30*time.Second)
	br.click(row)
	br.waitFor(fmt.Sprintf(`document.querySelector(%q)`, then), 60*time.Second)
}

// checkRunPage holds the run page to the API's report: its outcome, its
// energy per class, and every check passing (want "ok").
func checkRunPage(t *testing.T, br *browser, rep *client.RunReport, want string) {
	t.Helper()
	var verdict string
	br.must(`document.querySelector("#run-verdict").dataset.verdict`, &verdict)
	if verdict != want {
		t.Fatalf("run %s: the page's verdict %s, want %s: %s", rep.Run, verdict, want, br.text("#run-checks"))
	}
	var states []string
	br.must(`[...document.querySelectorAll("#run-checks li")].map((li) => li.dataset.state)`, &states)
	if len(states) != 9 || slices.ContainsFunc(states, func(s string) bool { return s != "ok" }) {
		t.Fatalf("run %s: the checks ended %v: %s", rep.Run, states, br.text("#run-checks"))
	}
	if got := br.text("#run-id"); got != rep.Run {
		t.Fatalf("the page shows run %s, the API %s", got, rep.Run)
	}
	var energy []client.Energy
	br.must(`[...document.querySelectorAll("tr[data-class]")].map((tr) => ({class: tr.dataset.class, measured_uj: Number(tr.dataset.measured), estimated_uj: Number(tr.dataset.estimated)}))`, &energy)
	var wantE []string
	for _, e := range rep.Energy {
		wantE = append(wantE, fmt.Sprintf("%s %d %d", e.Class, e.MeasuredUJ, e.EstimatedUJ))
	}
	var gotE []string
	for _, e := range energy {
		gotE = append(gotE, fmt.Sprintf("%s %d %d", e.Class, e.MeasuredUJ, e.EstimatedUJ))
	}
	sort.Strings(wantE)
	sort.Strings(gotE)
	if len(wantE) == 0 || fmt.Sprint(gotE) != fmt.Sprint(wantE) {
		t.Fatalf("the page's energy %v, the API's %v", gotE, wantE)
	}
	var detail string
	br.must(`document.querySelector('#run-checks li[data-name="receipt: the energy shown is the signed receipt\'s"]').textContent`, &detail)
	for _, e := range rep.Energy {
		if !strings.Contains(detail, fmt.Sprintf("%s %d µJ", e.Class, e.MeasuredUJ+e.EstimatedUJ)) {
			t.Fatalf("the signed receipt's figures as the page read them: %q; the API's %+v", detail, rep.Energy)
		}
	}
}

// checkFailed: the verdict is fail, and the check named failed saying
// reason (the checks before it passed).
func checkFailed(t *testing.T, br *browser, verdictSel, checksSel, name, reason string) {
	t.Helper()
	var verdict string
	br.must(fmt.Sprintf(`document.querySelector(%q).dataset.verdict`, verdictSel), &verdict)
	var checks []struct{ Name, State, Text string }
	br.must(fmt.Sprintf(`[...document.querySelectorAll("%s li")].map((li) => ({Name: li.dataset.name, State: li.dataset.state, Text: li.textContent}))`, checksSel), &checks)
	i := slices.IndexFunc(checks, func(c struct{ Name, State, Text string }) bool { return c.Name == name })
	if verdict != "fail" || i < 0 || checks[i].State != "fail" || !strings.Contains(checks[i].Text, reason) {
		t.Fatalf("verdict %s; want %q failed saying %q: %+v", verdict, name, reason, checks)
	}
	for _, c := range checks[:i] {
		if c.State != "ok" {
			t.Fatalf("a check before %q did not pass: %+v", name, c)
		}
	}
}

// nothingShown: the page shows the token form and none of ids, and has
// no table of anything.
func nothingShown(t *testing.T, br *browser, ids []string) {
	t.Helper()
	body := bodyText(br)
	for _, id := range ids {
		if strings.Contains(body, id) {
			t.Fatalf("without a valid token the page shows %s:\n%s", id, body)
		}
	}
	var n int
	br.must(`document.querySelectorAll("table, [data-sandbox], [data-run], [data-record], [data-fleet]").length`, &n)
	if n != 0 {
		t.Fatalf("without a valid token the page holds %d rows of data:\n%s", n, body)
	}
}

func bodyText(br *browser) string {
	var s string
	br.must(`document.documentElement.outerHTML`, &s)
	return s
}

// decodePNG decodes a screenshot, which must be w×h.
func decodePNG(t *testing.T, b []byte, w, h int) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG (%d bytes): %v", len(b), err)
	}
	if img.Bounds().Dx() != w || img.Bounds().Dy() != h {
		t.Fatalf("the screenshot is %v, want %dx%d", img.Bounds(), w, h)
	}
	return img
}

// near says whether c is within a few steps of want in each channel.
func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { return int(x>>8)-int(y) <= 6 && int(y)-int(x>>8) <= 6 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

// saveShot keeps a screenshot where $SANDBOX_CONSOLE_SHOTS names a
// directory (to look at); otherwise nothing.
func saveShot(t *testing.T, name string, b []byte) {
	if d := os.Getenv("SANDBOX_CONSOLE_SHOTS"); d != "" {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Log(err)
		}
	}
}
