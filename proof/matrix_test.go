package proof

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const hostile = `<script>alert("x")</script> | **bold** ` + "\x1b[31m"

// matrixLog is a log of three targets: a twice (its latest with a red
// S2 and a hostile reason), b once, c with a cell that skips tiers.
func matrixLog(t testing.TB) *Log {
	k := logKey(t, 1)
	a0 := cellOf("a", 0)
	a1 := cellOf("a", 1, Green, Green, Red, Unavailable, Unavailable, Green, Unavailable, Unavailable)
	a1.Tiers[3].Reason = hostile
	a1.Tiers[6].Reason = "no SEV-SNP or TDX"
	b := cellOf("b", 2, Green, Green, Green, Unavailable, Unavailable, Unavailable, Unavailable, Unavailable)
	b.Target.Accelerators = []string{"NVIDIA H200 (driver 570)"}
	c := cellOf("c", 3)
	c.Tiers = c.Tiers[:2]
	var log []byte
	for _, cell := range []Cell{a0, b, a1, c} {
		log = append(append(log, envelope(t, k, cell)...), '\n')
	}
	l, _, err := ParseLog(log, DefaultOrigin, verifying(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestMatrixRows(t *testing.T) {
	m := NewMatrix(matrixLog(t))
	if len(m.Rows) != 3 || m.Entries != 4 {
		t.Fatalf("%d rows of %d entries", len(m.Rows), m.Entries)
	}
	a := m.Rows[0]
	if a.Cells != 2 || a.Entry != 2 || a.Tiers[2].State != Red || a.Tiers[3].Reason != hostile {
		t.Fatalf("row a: %+v", a)
	}
	if m.Rows[1].Cells != 1 || !strings.Contains(m.Rows[1].Key, "H200") {
		t.Fatalf("row b: %+v", m.Rows[1])
	}
	if c := m.Rows[2]; c.Tiers[1].State != Green || c.Tiers[2].State != Missing || c.Tiers[7].State != Missing {
		t.Fatalf("row c: %+v", c)
	}
}

func TestMatrixText(t *testing.T) {
	var b bytes.Buffer
	if err := NewMatrix(matrixLog(t)).Text(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Columns are aligned; compared with each run of spaces as two.
	cols := regexp.MustCompile(`(\S) {2,}`).ReplaceAllString(out, "$1  ")
	for _, want := range []string{
		"proof matrix: 3 targets, 4 cells\n",
		"target  S0  S1  S2  S3  S4  S5  S6  S7\n",
		"linux · 6.1.a · amd64 · cpu a · kvm guest  green  green  RED  unavailable  unavailable  green  unavailable  unavailable\n",
		"  latest of 2 cells (entry 2)\n",
		"  S2 RED: exec: cell 1: it failed\n",
		"  S3 unavailable: <script>alert(\"x\")</script> | **bold** \ufffd[31m\n",
		"  S6 unavailable: no SEV-SNP or TDX\n",
		"linux · 6.1.b · amd64 · cpu b · kvm guest · NVIDIA H200 (driver 570)  green  green  green  unavailable",
		"  1 cell (entry 1)\n",
		"missing  missing\n",
		"  S7 missing: the cell gives no result for this tier\n",
	} {
		if !strings.Contains(cols, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("an escape sequence reaches the terminal")
	}
}

func TestMatrixMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := NewMatrix(matrixLog(t)).Markdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| target | cells | S0 | S1 | S2 | S3 | S4 | S5 | S6 | S7 |\n|---|---|---|---|---|---|---|---|---|---|\n",
		"| linux · 6.1.a · amd64 · cpu a · kvm guest | latest of 2 cells (entry 2) | ✅ green: exec b3:0100 |",
		" ❌ **RED**: exec: cell 1: it failed |",
		` ⬜ unavailable: &lt;script&gt;alert("x")&lt;/script&gt; \| \*\*bold\*\* ` + "\ufffd" + `\[31m |`,
		" ❔ missing: the cell gives no result for this tier |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n")[4:] {
		// Every row has its 10 cells: no | of a cell's text splits one.
		if n := len(regexp.MustCompile(`(^|[^\\])\|`).FindAllString(line, -1)); n != 11 {
			t.Errorf("row %d: %d cell borders: %s", i, n, line)
		}
	}
}

func TestMatrixHTMLEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := NewMatrix(matrixLog(t)).HTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "<script") || strings.Contains(page, "\x1b") {
		t.Fatalf("the hostile reason is not escaped:\n%s", page)
	}
	for _, want := range []string{
		`&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
		`<td class="red" title="exec: cell 1: it failed">RED<small>exec: cell 1: it failed</small></td>`,
		`default-src 'none'`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("no %q in the page", want)
		}
	}
	for _, external := range []string{"http://", "https://", "src=", "<link"} {
		if strings.Contains(page, external) {
			t.Errorf("the page loads something (%q)", external)
		}
	}
}

// chromium is the browser the page is checked in: Debian's, installed
// if missing and this test may (root, apt-get). It skips, saying why,
// only where it cannot be had.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	why := "chromium is not installed"
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("apt-get"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", "chromium").CombinedOutput()
			if p, err2 := exec.LookPath("chromium"); err2 == nil {
				return p
			}
			why = fmt.Sprintf("apt-get install chromium: %v: %s", err, lastLine(out))
		}
	}
	t.Skipf("%s (scripts/deps installs it)", why)
	return ""
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestMatrixHTMLInBrowser renders the page in a real headless browser:
// its DOM has a row per target and a cell per tier, the red cell is
// red, the hostile reason is text (no script element ran or exists),
// and a screenshot is a PNG.
func TestMatrixHTMLInBrowser(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "matrix.html")
	var b bytes.Buffer
	if err := NewMatrix(matrixLog(t)).HTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile")}, args...)
		cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.Bytes()
	}
	dom := string(run("--dump-dom"))
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(dom, -1)) }
	if n := count(`<th class="target" scope="row">`); n != 3 {
		t.Errorf("%d target rows, want 3\n%s", n, dom)
	}
	if n := count(`<td class="(green|red|unavailable|missing)" title=`); n != 24 {
		t.Errorf("%d tier cells, want 24", n)
	}
	if n := count(`<td class="red"`); n != 1 {
		t.Errorf("%d red cells, want 1", n)
	}
	if strings.Contains(dom, "<script") || !strings.Contains(dom, `&lt;script&gt;alert("x")&lt;/script&gt;`) {
		t.Errorf("the hostile reason is not text in the DOM:\n%s", dom)
	}
	shot := filepath.Join(dir, "matrix.png")
	run("--screenshot="+shot, "--window-size=1600,900")
	png, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(png))
	}
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("no screenshot")
	}
}
