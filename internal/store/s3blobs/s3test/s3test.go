package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// URL is an s3:// URL of bucket on g (path-style), for s3blobs.Open;
// its credentials are the owner's, from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (Env).
func (g *Gateway) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=" + g.Endpoint + "&region=" + Region + "&path-style=true"
}

// Env is the environment that makes a process the gateway's owner.
func (g *Gateway) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + Access, "AWS_SECRET_ACCESS_KEY=" + Secret}
}

// Version is the versitygw scripts/deps builds.
const Version = "v1.8.0"

// ReadyBound bounds a wait for the gateway to answer: a bound, not a
// measure (a loaded machine may take long; the test only fails past it).
const ReadyBound = 30 * time.Second

// The gateway's owner, and its region.
const (
	Access = "s3test-owner"
	Secret = "s3test-owner-secret-key-0123456789"
	Region = "us-east-1"
)

var (
	buildOnce sync.Once
	buildErr  error
	buckets   atomic.Int64
)

// gatewayBinary is versitygw in $SANDBOX_THIRDPARTY (else the checkout's
// .cache/thirdparty), built there if it is missing, except in CI, where
// scripts/deps must have built it.
func gatewayBinary(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SANDBOX_THIRDPARTY")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "thirdparty")
	}
	bin := filepath.Join(dir, "s3gw-versitygw-"+Version)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the S3 server these tests need, versitygw %s, is not at %s: scripts/deps builds it", Version, bin)
	}
	buildOnce.Do(func() {
		t.Logf("building versitygw %s's POSIX gateway into %s (once; scripts/deps does it too)", Version, dir)
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		buildErr = buildGateway(filepath.Join(root, "third_party", "s3gw"), dir, bin)
	})
	if buildErr != nil {
		t.Fatalf("the S3 server these tests need, versitygw %s, is not at %s and could not be built: %v", Version, bin, buildErr)
	}
	return bin
}

// buildGateway builds third_party/s3gw (src), versitygw's POSIX gateway
// from its library, into bin in dir.
func buildGateway(src, dir, bin string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return os.Rename(tmp, bin)
}

// repoRoot is the directory above the working directory with go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// Gateway is a versitygw process serving Root on a loopback port.
type Gateway struct {
	Root     string // the directory it keeps buckets in
	Endpoint string // http://127.0.0.1:PORT
	// Host is the address it listens on (default 127.0.0.1).
	Host   string
	t      testing.TB
	bin    string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// Start starts a gateway on a new root directory; the test's cleanup
// stops it and removes the directory.
func Start(t testing.TB) *Gateway { return StartOn(t, "127.0.0.1") }

// StartOn is Start on address host (one other network namespaces reach).
func StartOn(t testing.TB, host string) *Gateway {
	t.Helper()
	g := &Gateway{t: t, bin: gatewayBinary(t), Root: t.TempDir(), Host: host}
	g.Start()
	t.Cleanup(g.Stop)
	return g
}

// Start starts the gateway (again, after Kill) on a free port (another,
// if someone took the one it picked first) and waits until it answers.
func (g *Gateway) Start() {
	g.t.Helper()
	for try := 1; ; try++ {
		l, err := net.Listen("tcp", net.JoinHostPort(g.Host, "0"))
		if err != nil {
			g.t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		g.Endpoint = "http://" + addr
		g.out = &syncBuffer{}
		g.exited = make(chan struct{})
		g.cmd = exec.Command(g.bin, "--port", addr, "--access", Access, "--secret", Secret,
			"--region", Region, "--quiet", "posix", g.Root)
		g.cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no VGW_* or ROOT_* settings from outside
		g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
		dieWithParent(g.cmd)
		if err := g.cmd.Start(); err != nil {
			g.t.Fatalf("start versitygw: %v", err)
		}
		go func(cmd *exec.Cmd, exited chan struct{}) {
			cmd.Wait()
			close(exited)
		}(g.cmd, g.exited)
		err = g.waitReady()
		if err == nil {
			return
		}
		g.Stop()
		if try < 5 && strings.Contains(g.out.String(), "address already in use") {
			continue
		}
		g.t.Fatalf("versitygw on %s: %v\n%s", addr, err, g.out.String())
	}
}

// waitReady polls the gateway (ListBuckets) until it answers, it exits,
// or ReadyBound passes.
func (g *Gateway) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), ReadyBound)
	defer cancel()
	c := g.Client()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.ListBuckets(rctx, &s3.ListBucketsInput{})
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-g.exited:
			return fmt.Errorf("exited: %v", g.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not answering after %v: %v", ReadyBound, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill kills the gateway at once (SIGKILL), as a crash would.
func (g *Gateway) Kill() {
	g.cmd.Process.Kill()
	<-g.exited
}

// Stop stops the gateway if it runs.
func (g *Gateway) Stop() {
	select {
	case <-g.exited:
	default:
		g.Kill()
	}
}

// Client is a plain S3 client of the gateway, as its owner: tests make
// buckets and plant objects with it, behind a store's back.
func (g *Gateway) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(g.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(Access, Secret, ""),
	})
}

// Bucket makes a new bucket and returns its name.
func (g *Gateway) Bucket() string {
	g.t.Helper()
	name := fmt.Sprintf("s3test-%d-%d", os.Getpid(), buckets.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), ReadyBound)
	defer cancel()
	if _, err := g.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		g.t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// syncBuffer is a bytes.Buffer a process may write while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
