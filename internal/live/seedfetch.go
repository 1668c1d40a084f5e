package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/internal/gitobj"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

// seedCAEnv is the variable of a sandbox's environment (its creator's,
// never its guest's) that names the CA bundle a seed's https fetch
// trusts, in place of the system's.
const seedCAEnv = "GIT_SSL_CAINFO"

// seedConfig is git's whole configuration for a seed's fetch, given on
// its environment (GIT_CONFIG_*: the command line's scope, above every
// file), with no system or global file read; the repository's own file
// is the one git clone writes in a directory no one else reaches. Two
// entries are slots the run's shell fills: http.proxy, which it sets to
// the run's own egress proxy (HTTPS_PROXY, which the host's executor
// gives it: its only way out) for an https source, and stays empty (no
// proxy) for a local one; and last, http.extraHeader, empty (which clears
// any header) or, where a bearer is given, the header, made from the
// run's standard input.
func seedConfig(https bool, ca string) (c [][2]string, proxySlot, bearerSlot int) {
	allow := func(b bool) string {
		if b {
			return "always"
		}
		return "never"
	}
	c = [][2]string{
		{"safe.directory", "*"}, // the source may be anyone's; the run is the boundary
		{"core.hooksPath", "/dev/null"},
		{"core.fsmonitor", "false"},
		{"credential.helper", ""},
		{"protocol.allow", "never"},
		{"protocol.https.allow", allow(https)},
		{"protocol.file.allow", allow(!https)},
		{"http.sslVerify", "true"},
		{"http.followRedirects", "false"},
		{"transfer.fsckObjects", "true"},
		{"http.proxy", ""},
	}
	proxySlot = len(c) - 1
	if ca != "" {
		c = append(c, [2]string{"http.sslCAInfo", ca})
	}
	c = append(c, [2]string{"http.extraHeader", ""})
	return c, proxySlot, len(c) - 1
}

// seedEnv is a seed fetch's environment (git's configuration; never a
// bearer) and the script that fills its slots and runs git.
func seedEnv(https bool, ca string) (map[string]string, string) {
	env := map[string]string{"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
		"GIT_TERMINAL_PROMPT": "0", "HOME": "/tmp"}
	c, proxy, bearer := seedConfig(https, ca)
	env["GIT_CONFIG_COUNT"] = strconv.Itoa(len(c))
	for i, kv := range c {
		env["GIT_CONFIG_KEY_"+strconv.Itoa(i)] = kv[0]
		env["GIT_CONFIG_VALUE_"+strconv.Itoa(i)] = kv[1]
	}
	script := ""
	if https {
		script = fmt.Sprintf(`export GIT_CONFIG_VALUE_%d="${HTTPS_PROXY-}"; `, proxy)
	}
	script += fmt.Sprintf(`if [ -n "$SANDBOX_SEED_BEARER" ]; then IFS= read -r tok || exit 2; export GIT_CONFIG_VALUE_%d="Authorization: Bearer $tok"; fi; `, bearer) +
		`exec git clone --quiet --template= --no-hardlinks --no-recurse-submodules --branch "$SANDBOX_SEED_REF" -- "$SANDBOX_SEED_SOURCE" "$SANDBOX_SEED_DIR/repo"`
	return env, script
}

// beneathWritable is the read-write grant of sb's that p is at or
// beneath ("" for none): what the sandbox can change there.
func (sb *Sandbox) beneathWritable(p string) string {
	for _, s := range sb.Grants.Storage {
		if s.Mode == grant.RW && grant.Within(s.Path, p) {
			return s.Path
		}
	}
	return ""
}

// seedReadable checks that the seed reads nothing its sandbox can write:
// a local source, and the CA bundle its environment names, must be
// readable through its grants and beneath none of its read-write ones.
// It returns the CA bundle ("" for the system's).
func (sb *Sandbox) seedReadable(source string) (string, error) {
	if strings.HasPrefix(source, "https://") {
		ca := sb.Env[seedCAEnv]
		if ca == "" {
			return "", nil
		}
		if _, _, err := sb.grantFor(ca, false); err != nil {
			return "", fmt.Errorf("the CA bundle %s (%s): %w", ca, seedCAEnv, err)
		}
		if w := sb.beneathWritable(ca); w != "" {
			return "", fmt.Errorf("the CA bundle %s (%s) is beneath fs:%s:rw, which the sandbox can write: a seed trusts no file the sandbox can change", ca, seedCAEnv, w)
		}
		return ca, nil
	}
	if w := sb.beneathWritable(source); w != "" {
		return "", fmt.Errorf("source %s is beneath fs:%s:rw, which the sandbox can write: a seed reads no repository the sandbox can change (grant it fs:%s:ro)", source, w, source)
	}
	return "", nil
}

// seedFetch clones req's ref into dir/repo in a run of its own: S1,
// confined like any run, its grants only what the fetch needs of the
// sandbox's (its compute budget; its net grants for an https source, or
// the local source read-only; the CA bundle read-only) and dir
// read-write. The sandbox cannot reach dir, and nothing of the sandbox
// is in the run: git reads no configuration file the sandbox can write.
// The bearer comes on the run's standard input, which no record keeps.
func (h *Manager) seedFetch(ctx context.Context, sb *Sandbox, req SeedRequest, dir string) (*host.Run, error) {
	https := strings.HasPrefix(req.Source, "https://")
	ca, err := sb.seedReadable(req.Source)
	if err != nil {
		return nil, err
	}
	g := grant.Set{Compute: append([]grant.Compute(nil), sb.Grants.Compute...)}
	if https {
		g.Net = append([]grant.Net(nil), sb.Grants.Net...)
	} else {
		g.Storage = append(g.Storage, grant.Storage{Path: req.Source, Mode: grant.RO})
	}
	if ca != "" { // storage grants are directories: the one that holds it
		g.Storage = append(g.Storage, grant.Storage{Path: filepath.Dir(ca), Mode: grant.RO})
	}
	g.Storage = append(g.Storage, grant.Storage{Path: dir, Mode: grant.RW})
	if err := g.Normalize(); err != nil {
		return nil, err
	}
	env, script := seedEnv(https, ca)
	env["SANDBOX_SEED_REF"], env["SANDBOX_SEED_SOURCE"], env["SANDBOX_SEED_DIR"] = req.Ref, req.Source, dir
	if req.Bearer != "" {
		env["SANDBOX_SEED_BEARER"] = "1"
	}
	r, err := host.Command(host.CommandLine{Args: []string{"sh", "-c", script, "seed"}, Env: env, Grants: g, Cwd: dir})
	if err != nil {
		return nil, err
	}
	t := tier.S1
	var out, errb bytes.Buffer
	r.Tier, r.Deadline, r.Stdout, r.Stderr = &t, 10*time.Minute, &out, &errb
	if req.Bearer != "" {
		r.Stdin = strings.NewReader(req.Bearer + "\n")
	}
	r.Notes = []string{fmt.Sprintf("the fetch of a seed of live sandbox %s: git, in a run of its own that the sandbox cannot reach, its configuration the host's", sb.ID)}
	p, err := h.Plan(ctx, r)
	if err != nil {
		return nil, err
	}
	run, err := h.Execute(ctx, p, p.Executor().Run)
	if err != nil {
		return nil, err
	}
	if o := run.Result.Outcome; o.ExitCode == nil || *o.ExitCode != 0 {
		msg := strings.TrimSpace(errb.String())
		if o.ExitCode != nil && *o.ExitCode == 127 {
			msg = "git is not installed on this host"
		}
		return run, fmt.Errorf("%s (run %s): %s", o.Status, run.ID, msg)
	}
	return run, nil
}

// verifyFetched reads, from the repository a seed fetched (repo, its
// .git beside the checkout), the commit its branch ref names, checking
// every object read against its name, and compares the checkout with
// that commit's tree; it returns the commit.
func verifyFetched(repo, ref string) (string, error) {
	r, err := gitobj.Open(repo + "/.git")
	if err != nil {
		return "", err
	}
	defer r.Close()
	head, err := r.Branch(ref)
	if err != nil {
		return "", err
	}
	if err := r.CheckCheckout(head, repo); err != nil {
		return "", fmt.Errorf("the checkout is not commit %s's tree: %w", head, err)
	}
	return head.String(), nil
}

// seedLand sweeps sandbox id's workspace and lands repo in it: an exec of
// the sandbox (sealed, in its record) extracting a tar stream the host
// writes from repo, which no one changes any more.
func (h *Manager) seedLand(ctx context.Context, id, owner, repo string) (*host.Run, error) {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := writeTree(pw, repo)
		pw.CloseWithError(err)
		werr <- err
	}()
	var out, errb bytes.Buffer
	x := ExecRequest{Args: []string{"sh", "-c", `find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + && exec tar -x -p -f -`},
		Stdin: pr, Stdout: &out, Stderr: &errb, Deadline: 10 * time.Minute}
	r, err := h.Exec(ctx, id, owner, x)
	pr.CloseWithError(errors.New("the landing ended"))
	wErr := <-werr
	if err != nil {
		return nil, err
	}
	if o := r.Result.Outcome; o.ExitCode == nil || *o.ExitCode != 0 {
		msg := strings.TrimSpace(errb.String())
		if o.ExitCode != nil && *o.ExitCode == 127 {
			msg = "sh, find or tar is not in the sandbox's root filesystem"
		}
		return r, fmt.Errorf("%s (run %s): %s", o.Status, r.ID, msg)
	}
	if wErr != nil {
		return r, fmt.Errorf("the checkout's stream (run %s): %w", r.ID, wErr)
	}
	return r, nil
}

// writeTree writes the tree at dir as a tar stream: directories, regular
// files and links, read without following a link; anything else is an
// error.
func writeTree(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: p, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode().Type() == fs.ModeSymlink:
			if hdr.Linkname, err = root.Readlink(p); err != nil {
				return err
			}
			hdr.Typeflag = tar.TypeSymlink
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			f, err := root.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if n, err := io.Copy(tw, f); err != nil || n != fi.Size() {
				return fmt.Errorf("%s: %d of %d bytes: %v", p, n, fi.Size(), err)
			}
			return nil
		}
		return fmt.Errorf("%s: a %s, neither a file, a directory nor a link", p, fi.Mode().Type())
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
