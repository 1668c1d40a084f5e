package s3blobs

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

// The tests run against a real S3 server: versitygw's POSIX gateway, which
// keeps a bucket as a directory and an object as a file.

// gatewayVersion is the versitygw scripts/deps builds.
const gatewayVersion = "v1.8.0"

// readyBound bounds a wait for the gateway to answer: a bound, not a
// measure (a loaded machine may take long; the test only fails past it).
const readyBound = 30 * time.Second

const (
	testAccess = "s3blobs-test"
	testSecret = "s3blobs-test-secret-key-0123456789"
)

var (
	buildOnce sync.Once
	buildErr  error
	buckets   atomic.Int64
)

// gatewayBinary is versitygw in $SANDBOX_THIRDPARTY (else the checkout's
// .cache/thirdparty), built there if it is missing, except in CI, where
// scripts/deps must have built it.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SANDBOX_THIRDPARTY")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "thirdparty")
	}
	bin := filepath.Join(dir, "versitygw-"+gatewayVersion)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the S3 server these tests need, versitygw %s, is not at %s: scripts/deps builds it", gatewayVersion, bin)
	}
	buildOnce.Do(func() {
		t.Logf("building versitygw %s into %s (once; scripts/deps does it too)", gatewayVersion, dir)
		buildErr = buildGateway(dir, bin)
	})
	if buildErr != nil {
		t.Fatalf("the S3 server these tests need, versitygw %s, is not at %s and could not be built: %v", gatewayVersion, bin, buildErr)
	}
	return bin
}

func buildGateway(dir, bin string) error {
	gobin, err := os.MkdirTemp("", "versitygw-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gobin)
	cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+gatewayVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install: %v\n%s", err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Rename(filepath.Join(gobin, "versitygw"), bin)
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

// gateway is a versitygw process serving root on a loopback port.
type gateway struct {
	t        *testing.T
	bin      string
	root     string
	endpoint string
	cmd      *exec.Cmd
	out      *syncBuffer
	exited   chan struct{}
}

// startGateway starts a gateway on a new root directory; the test's
// cleanup stops it and removes the directory.
func startGateway(t *testing.T) *gateway {
	t.Helper()
	g := &gateway{t: t, bin: gatewayBinary(t), root: t.TempDir()}
	g.start()
	t.Cleanup(g.stop)
	return g
}

// start starts the gateway on a free port (another, if someone took the
// one it picked first) and waits until it answers.
func (g *gateway) start() {
	g.t.Helper()
	for try := 1; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			g.t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		g.endpoint = "http://" + addr
		g.out = &syncBuffer{}
		g.exited = make(chan struct{})
		g.cmd = exec.Command(g.bin, "--port", addr, "--access", testAccess, "--secret", testSecret,
			"--region", DefaultRegion, "--quiet", "posix", g.root)
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
		g.stop()
		if try < 5 && strings.Contains(g.out.String(), "address already in use") {
			continue
		}
		g.t.Fatalf("versitygw on %s: %v\n%s", addr, err, g.out.String())
	}
}

// waitReady polls the gateway (ListBuckets) until it answers, it exits,
// or readyBound passes.
func (g *gateway) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyBound)
	defer cancel()
	c := g.client()
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
			return fmt.Errorf("not answering after %v: %v", readyBound, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill kills the gateway at once (SIGKILL), as a crash would.
func (g *gateway) kill() {
	g.cmd.Process.Kill()
	<-g.exited
}

// stop stops the gateway if it runs.
func (g *gateway) stop() {
	select {
	case <-g.exited:
	default:
		g.kill()
	}
}

// client is a plain S3 client of the gateway, as its owner: the tests
// make buckets and plant objects with it, behind the store's back.
func (g *gateway) client() *s3.Client {
	return s3.New(s3.Options{
		Region:       DefaultRegion,
		BaseEndpoint: aws.String(g.endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
	})
}

// bucket makes a new bucket and returns its name.
func (g *gateway) bucket() string {
	g.t.Helper()
	name := fmt.Sprintf("s3blobs-%d", buckets.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), readyBound)
	defer cancel()
	if _, err := g.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		g.t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// config is a Config for bucket on the gateway, as its owner.
func (g *gateway) config(bucket string) Config {
	return Config{
		Endpoint: g.endpoint, Bucket: bucket, Region: DefaultRegion, PathStyle: true,
		AccessKeyID: testAccess, SecretAccessKey: testSecret,
	}
}

// open opens a store in a new bucket, with c's settings but for where and
// who.
func (g *gateway) open(t *testing.T, c Config) *Blobs {
	t.Helper()
	w := g.config(g.bucket())
	c.Endpoint, c.Bucket, c.Region, c.PathStyle, c.AccessKeyID, c.SecretAccessKey = w.Endpoint, w.Bucket, w.Region, w.PathStyle, w.AccessKeyID, w.SecretAccessKey
	b, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keys lists every object in bucket.
func (g *gateway) keys(t *testing.T, bucket string) []string {
	t.Helper()
	out, err := g.client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("list %s: %v", bucket, err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// plant puts data at key behind the store's back.
func (g *gateway) plant(t *testing.T, bucket, key string, data []byte) {
	t.Helper()
	_, err := g.client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
	})
	if err != nil {
		t.Fatalf("plant %s: %v", key, err)
	}
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
