package egress

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/grant"
)

// BenchmarkRequest measures one small GET on loopback, directly and
// through the proxy, side by side; p50-µs is the median request.
// keepalive reuses connections; newconn opens one per request (through
// the proxy: a CONNECT per request). inject-https is a credential-injected
// host: TLS terminated by the proxy, the header added, TLS again upstream.
func BenchmarkRequest(b *testing.B) {
	plain := newServer(b, false, "127.0.0.1:0")
	secure := newServer(b, true, "127.0.0.1:0")
	tunneled := newServer(b, true, "127.0.0.1:0")
	s, enf := grants(b, fmt.Sprintf("net:127.0.0.1:%d", plain.port()), fmt.Sprintf("net:127.0.0.1:%d", secure.port()), fmt.Sprintf("net:127.0.0.1:%d", tunneled.port()))
	for i := range s.Net {
		if s.Net[i].Port == secure.port() {
			s.Net[i].Inject = []grant.Inject{{Header: "X-Api-Key", Secret: "env:K"}}
		}
	}
	inj, err := Secrets(s, func(string) (string, bool) { return "k", true })
	if err != nil {
		b.Fatal(err)
	}
	up := x509.NewCertPool()
	up.AddCert(secure.Certificate())
	up.AddCert(tunneled.Certificate())
	p, paddr := startProxy(b, Config{Enforcer: enf, Inject: inj, UpstreamRoots: up})
	runRoots := x509.NewCertPool()
	runRoots.AppendCertsFromPEM(p.CACertPEM())
	direct := func(keep bool) *http.Client {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: up}}}
	}
	proxied := func(keep bool, roots *x509.CertPool) *http.Client {
		u, _ := url.Parse("http://" + paddr)
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: !keep, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"direct-keepalive", direct(true), plain.URL},
		{"proxy-keepalive", proxied(true, nil), plain.URL},
		{"direct-newconn", direct(false), plain.URL},
		{"direct-https-newconn", direct(false), tunneled.URL},
		{"proxy-connect-newconn", proxied(false, up), tunneled.URL},
		{"direct-https-keepalive", direct(true), secure.URL},
		{"inject-https-keepalive", proxied(true, runRoots), secure.URL},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				resp, err := tc.c.Get(tc.url + "/")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		})
	}
}

// BenchmarkThroughput moves 16 MiB bodies on loopback, directly, through
// the proxy's HTTP forwarding and through a CONNECT tunnel.
func BenchmarkThroughput(b *testing.B) {
	body := make([]byte, 16<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	})}}
	srv.Start()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, enf := grants(b, fmt.Sprintf("net:127.0.0.1:%d", port))
	_, paddr := startProxy(b, Config{Enforcer: enf})
	u, _ := url.Parse("http://" + paddr)
	for _, tc := range []struct {
		name string
		c    *http.Client
	}{
		{"direct", &http.Client{}},
		{"proxy-http", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				resp, err := tc.c.Get(srv.URL + "/")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("proxy-connect", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			c, err := net.Dial("tcp", paddr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", port)
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			if n < int64(len(body)) {
				b.Fatalf("%d bytes", n)
			}
		}
	})
}
