//go:build linux

package native

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
)

// ProxyPort is where a run with net grants finds its egress proxy:
// 127.0.0.1:ProxyPort in its own network namespace, its only way out.
const ProxyPort = 3128

// CAPath is where a run with injected credentials finds the roots it
// trusts: the system's, and its own authority.
const CAPath = egress.CAPath

// egress prepares a run's proxy: the injected secrets resolved from the
// host's environment and files, the listener requested from init, the
// one port Landlock lets the program connect to, the proxy settings in
// its environment, and, with injections, the run's own authority added
// to the roots it trusts. cleanup closes the proxy and removes the
// bundle.
func (e *Executor) egress(g grant.Set, enf *grant.Enforcer, sp *s1init.Spec) (*egress.Proxy, func(), error) {
	inj, err := egress.Secrets(g, nil)
	if err != nil {
		return nil, nil, err
	}
	proxy, err := egress.New(egress.Config{Enforcer: enf, Inject: inj, UpstreamRoots: e.cfg.EgressRoots})
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { proxy.Close() }
	sp.ProxyPort = ProxyPort
	ex := &sp.Exec
	ex.ConnectPorts = append(ex.ConnectPorts, ProxyPort)
	url := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	ca := ""
	if pem := proxy.CACertPEM(); pem != nil {
		roots := filepath.Join(e.cfg.StateDir, "roots")
		os.MkdirAll(roots, 0o700)
		dir, err := e.mkTemp(roots, "ca")
		if err != nil {
			proxy.Close()
			return nil, nil, err
		}
		os.Chmod(dir, 0o755)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real // binds are walked without following links
		}
		path := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(path, egress.TrustBundle(pem), 0o644); err != nil {
			os.RemoveAll(dir)
			proxy.Close()
			return nil, nil, err
		}
		cleanup = func() { proxy.Close(); os.RemoveAll(dir) }
		sp.Binds = append(sp.Binds, s1init.Bind{Host: path, Path: CAPath, File: true, Internal: true})
		ex.ROFiles = append(ex.ROFiles, CAPath)
		ca = CAPath
	}
	vars := egress.ProxyEnv(url, ca)
	have := map[string]bool{}
	for _, kv := range ex.Env {
		k, _, _ := strings.Cut(kv, "=")
		have[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !have[k] {
			ex.Env = append(ex.Env, k+"="+vars[k])
		}
	}
	return proxy, cleanup, nil
}
