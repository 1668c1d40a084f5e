package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// browser is Debian's headless chromium driven over the Chrome DevTools
// Protocol (its websocket, golang.org/x/net/websocket): load a page,
// evaluate script in it, click where an element is drawn (real mouse
// events), type, take a screenshot. What the page throws, and every
// console error (a CSP violation, say), is kept for the test.
type browser struct {
	t    testing.TB
	cmd  *exec.Cmd
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
	wait map[int]chan cdpReply
	errs []string // exceptions and console errors, in order
	done chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// chromiumBin is Debian's chromium, or the test is skipped saying why.
func chromiumBin(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("chromium is not installed (scripts/deps installs it): %v", err)
	}
	return p
}

// spkiHash is the base64 SHA-256 of the certificate's public key, as
// chromium's --ignore-certificate-errors-spki-list takes it: the test's
// self-signed certificate is trusted, and the page is a secure context
// (WebCrypto) as it would be under a real one.
func spkiHash(t testing.TB, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", certFile)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// newBrowser starts chromium with a viewport of w×h CSS pixels at a
// device scale of 1, trusting the certificate in certFile.
func newBrowser(t testing.TB, certFile string, w, h int) *browser {
	t.Helper()
	bin := chromiumBin(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-background-networking", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--remote-debugging-port=0", "--remote-allow-origins=*", "--ignore-certificate-errors-spki-list="+spkiHash(t, certFile),
		fmt.Sprintf("--window-size=%d,%d", w, h), "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, cmd: cmd, wait: map[int]chan cdpReply{}, done: make(chan struct{})}
	t.Cleanup(b.close)
	found := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	var browserURL string
	select {
	case browserURL = <-found:
	case <-time.After(30 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("chromium did not open its DevTools port in 30 s:\n%s", log.String())
	}
	// The page's own target, from the DevTools HTTP endpoint.
	host := strings.TrimPrefix(browserURL, "ws://")
	host = host[:strings.IndexByte(host, '/')]
	var pageWS string
	for i := 0; i < 50 && pageWS == ""; i++ {
		resp, err := http.Get("http://" + host + "/json/list")
		if err == nil {
			var targets []struct{ Type, WebSocketDebuggerURL string }
			json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
			for _, tg := range targets {
				if tg.Type == "page" && tg.WebSocketDebuggerURL != "" {
					pageWS = tg.WebSocketDebuggerURL
					break
				}
			}
		}
		if pageWS == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if pageWS == "" {
		t.Fatal("chromium has no page target")
	}
	b.ws, err = websocket.Dial(pageWS, "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("the page's DevTools websocket: %v", err)
	}
	b.ws.MaxPayloadBytes = 64 << 20
	go b.read()
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		b.call(m, nil, nil)
	}
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": w, "height": h, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

func (b *browser) close() {
	if b.ws != nil {
		b.ws.Close()
	}
	if b.cmd.Process != nil {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		b.cmd.Wait()
	}
}

// read delivers replies to their calls and keeps the page's errors.
func (b *browser) read() {
	defer close(b.done)
	for {
		var raw []byte
		if err := websocket.Message.Receive(b.ws, &raw); err != nil {
			return
		}
		var m struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			cdpReply
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.wait[m.ID]
			delete(b.wait, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.cdpReply
			}
			continue
		}
		switch m.Method {
		case "Runtime.exceptionThrown":
			var p struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			json.Unmarshal(m.Params, &p)
			b.keep("exception: " + p.ExceptionDetails.Text + " " + p.ExceptionDetails.Exception.Description)
		case "Log.entryAdded":
			var p struct {
				Entry struct{ Level, Source, Text, URL string } `json:"entry"`
			}
			json.Unmarshal(m.Params, &p)
			// The terminal asks to interrupt its exec again while the
			// service answers 404 (the call not yet in flight): expected.
			if p.Entry.Level == "error" && !(p.Entry.Source == "network" && strings.Contains(p.Entry.URL, "/v1/interrupts/")) {
				b.keep(fmt.Sprintf("log (%s): %s %s", p.Entry.Source, p.Entry.Text, p.Entry.URL))
			}
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string `json:"type"`
				Args []struct {
					Value any `json:"value"`
				} `json:"args"`
			}
			json.Unmarshal(m.Params, &p)
			if p.Type == "error" {
				b.keep(fmt.Sprintf("console.error: %v", p.Args))
			}
		}
	}
}

func (b *browser) keep(s string) {
	b.mu.Lock()
	b.errs = append(b.errs, s)
	b.mu.Unlock()
}

// pageErrors returns and forgets what the page threw or logged as errors.
func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.errs
	b.errs = nil
	return e
}

// call sends a DevTools command and decodes its result into out.
func (b *browser) call(method string, params any, out any) error {
	b.t.Helper()
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpReply, 1)
	b.wait[id] = ch
	b.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := websocket.Message.Send(b.ws, string(msg)); err != nil {
		b.t.Fatalf("DevTools %s: %v", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("DevTools %s: %d %s", method, r.Error.Code, r.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-b.done:
		b.t.Fatalf("DevTools %s: the browser went away", method)
	case <-time.After(60 * time.Second):
		b.t.Fatalf("DevTools %s: no answer in 60 s", method)
	}
	return nil
}

// eval evaluates expr in the page (awaiting a promise) and decodes its
// value into out; an exception is an error.
func (b *browser) eval(expr string, out any) error {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("%s: %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// must is eval that fails the test on an error.
func (b *browser) must(expr string, out any) {
	b.t.Helper()
	if err := b.eval(expr, out); err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
}

// text is the text of the element selector finds ("" where none).
func (b *browser) text(selector string) string {
	b.t.Helper()
	var s string
	b.must(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, selector), &s)
	return s
}

// waitFor waits until expr is truthy in the page.
func (b *browser) waitFor(expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		var ok bool
		if last = b.eval("!!("+expr+")", &ok); last == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	var body string
	b.eval(`document.body ? document.body.innerText : ""`, &body)
	b.t.Fatalf("waited %s for %s (last error %v); the page says:\n%s\npage errors: %v", timeout, expr, last, body, b.pageErrors())
}

// navigate loads url and waits for its document to be complete.
func (b *browser) navigate(url string) {
	b.t.Helper()
	if err := b.call("Page.navigate", map[string]any{"url": url}, nil); err != nil {
		b.t.Fatal(err)
	}
	b.waitFor(`document.readyState === "complete" && location.href !== "about:blank"`, 30*time.Second)
}

// open loads url as a new document (by way of about:blank: a URL that
// differs from the page's only in its fragment would not reload it).
func (b *browser) open(url string) {
	b.t.Helper()
	if err := b.call("Page.navigate", map[string]any{"url": "about:blank"}, nil); err != nil {
		b.t.Fatal(err)
	}
	b.waitFor(`location.href === "about:blank"`, 30*time.Second)
	b.navigate(url)
}

// rect is where selector's element is drawn, in CSS pixels of the
// viewport, once scrolled into view.
type rect struct{ X, Y, W, H float64 }

func (b *browser) rect(selector string) rect {
	b.t.Helper()
	var r *rect
	b.must(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return null;
		e.scrollIntoView({block: "center", inline: "center"}); const r = e.getBoundingClientRect();
		return {X: r.left, Y: r.top, W: r.width, H: r.height}; })()`, selector), &r)
	if r == nil {
		b.t.Fatalf("no element %s to click", selector)
	}
	return *r
}

// click presses and releases the left button over selector's element.
func (b *browser) click(selector string) {
	b.t.Helper()
	r := b.rect(selector)
	x, y := r.X+r.W/2, r.Y+r.H/2
	for _, typ := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		if err := b.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1}, nil); err != nil {
			b.t.Fatal(err)
		}
	}
}

// typeText types s into the focused element.
func (b *browser) typeText(s string) {
	b.t.Helper()
	if err := b.call("Input.insertText", map[string]any{"text": s}, nil); err != nil {
		b.t.Fatal(err)
	}
}

// screenshot is a PNG of the viewport.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var r struct{ Data string }
	if err := b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		b.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}
