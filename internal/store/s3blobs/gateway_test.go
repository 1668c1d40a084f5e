package s3blobs

import (
	"bytes"
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/opensubstrate/sandbox/internal/store/s3blobs/s3test"
)

// The tests run against a real S3 server: versitygw's POSIX gateway,
// which keeps a bucket as a directory and an object as a file (s3test).

// testAccess and testSecret are the gateway owner's; readyBound bounds a
// wait (a bound, not a measure).
const (
	testAccess = s3test.Access
	testSecret = s3test.Secret
	readyBound = s3test.ReadyBound
)

// gateway is s3test's, with what these tests add.
type gateway struct {
	*s3test.Gateway
	t *testing.T
}

func startGateway(t *testing.T) *gateway { return &gateway{s3test.Start(t), t} }

func (g *gateway) start()             { g.Start() }
func (g *gateway) kill()              { g.Kill() }
func (g *gateway) client() *s3.Client { return g.Client() }
func (g *gateway) bucket() string     { return g.Bucket() }

// config is a Config for bucket on the gateway, as its owner.
func (g *gateway) config(bucket string) Config {
	return Config{
		Endpoint: g.Endpoint, Bucket: bucket, Region: DefaultRegion, PathStyle: true,
		AccessKeyID: s3test.Access, SecretAccessKey: s3test.Secret,
	}
}

// open opens a store in a new bucket, with c's settings but for where and
// who.
func (g *gateway) open(t *testing.T, c Config) *Blobs {
	t.Helper()
	w := g.config(g.Bucket())
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
	out, err := g.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
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
	_, err := g.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
	})
	if err != nil {
		t.Fatalf("plant %s: %v", key, err)
	}
}
