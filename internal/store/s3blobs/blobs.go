package s3blobs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store"
)

// MaxBlob is the largest blob a store puts or reads: 1 GiB. A blob is
// held in memory whole (store.Blobs deals in byte slices), so the bound is
// what one read may cost, whatever the server says an object's length is;
// the blobs this project stores (a memory image's 1 MiB chunks, snapshot
// parts) are far below it, and it is below S3's 5 GiB for one PUT.
const MaxBlob = 1 << 30

// OpenTimeout bounds Open's check that the bucket answers.
const OpenTimeout = 30 * time.Second

var (
	// ErrNoBucket is wrapped by the error for a bucket the server does
	// not have.
	ErrNoBucket = errors.New("no such bucket")
	// ErrDenied is wrapped by the error for credentials the server
	// refuses (an unknown access key, a wrong secret, no permission).
	ErrDenied = errors.New("the S3 server refused the credentials")
	// ErrCorrupt is wrapped by the error for an object whose bytes do
	// not hash to the address it is stored under.
	ErrCorrupt = store.ErrCorrupt
	// ErrTooLarge is wrapped by the error for a blob over the bound
	// (Config.MaxSize, at most MaxBlob), put or read.
	ErrTooLarge = errors.New("blob over the size bound")
)

// Blobs is a content-addressed blob store in an S3 bucket: the blob at
// address a is the object PREFIX + "blobs/" + a.Hex(). It implements
// store.Blobs; its methods are safe for concurrent use.
type Blobs struct {
	s3     *s3.Client
	bucket string
	prefix string
	max    int64
	access string // the access key ID, named in ErrDenied's errors
	where  string // the store's URL, named in every error
}

// Open opens the store at rawURL (see ParseURL), with the credentials in
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, and
// checks that the bucket answers them (within OpenTimeout).
func Open(rawURL string) (*Blobs, error) {
	return open(rawURL, os.Getenv)
}

func open(rawURL string, getenv func(string) string) (*Blobs, error) {
	c, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c.AccessKeyID = getenv("AWS_ACCESS_KEY_ID")
	c.SecretAccessKey = getenv("AWS_SECRET_ACCESS_KEY")
	c.SessionToken = getenv("AWS_SESSION_TOKEN")
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return nil, fmt.Errorf("%w: %s: credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", ErrConfig, c.URL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
	defer cancel()
	return New(ctx, c)
}

// New opens the store c says, and checks that its bucket answers c's
// credentials (by listing at most one key under PREFIX/blobs/: they need
// list permission as well as get and put): an error wraps ErrNoBucket or
// ErrDenied where that is why not.
func New(ctx context.Context, c Config) (*Blobs, error) {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if field, err := c.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, field, err)
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return nil, fmt.Errorf("%w: %s: credentials: an access key ID and a secret are needed", ErrConfig, c.URL())
	}
	o := s3.Options{
		Region:       c.Region,
		BaseEndpoint: aws.String(c.Endpoint),
		UsePathStyle: c.PathStyle,
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
	}
	if c.HTTPClient != nil {
		o.HTTPClient = c.HTTPClient
	}
	b := &Blobs{
		s3:     s3.New(o),
		bucket: c.Bucket,
		prefix: c.Prefix,
		max:    c.MaxSize,
		access: c.AccessKeyID,
		where:  c.URL(),
	}
	if b.max == 0 {
		b.max = MaxBlob
	}
	_, err := b.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(b.bucket), Prefix: aws.String(b.prefix + "blobs/"), MaxKeys: aws.Int32(1),
	})
	if err != nil {
		return nil, b.fail("open", nil, err)
	}
	return b, nil
}

// String is the store's URL.
func (b *Blobs) String() string { return b.where }

// key is where the blob at a is kept.
func (b *Blobs) key(a addr.Addr) string { return b.prefix + "blobs/" + a.Hex() }

// PutBlob is PutBlobContext without a deadline.
func (b *Blobs) PutBlob(a addr.Addr, data []byte) error {
	return b.PutBlobContext(context.Background(), a, data)
}

// PutBlobContext stores data under its address a, in one PUT: the object
// appears whole or not at all, and a put cancelled or cut off leaves none.
// Bytes that are not a's, or over the bound, are refused before anything
// is sent. An object already there with data's length and CRC32 (its
// length alone, on a server that keeps no checksums) is left as it is;
// any other is replaced, so a put mends a damaged blob.
func (b *Blobs) PutBlobContext(ctx context.Context, a addr.Addr, data []byte) error {
	if got := addr.Of(data); got != a {
		return fmt.Errorf("s3 blob store %s: put %s: the bytes given hash to %s", b.where, a, got)
	}
	if int64(len(data)) > b.max {
		return fmt.Errorf("s3 blob store %s: put %s: %w: %d bytes, the bound is %d", b.where, a, ErrTooLarge, len(data), b.max)
	}
	sum := crc32.ChecksumIEEE(data)
	crc := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
	head, err := b.s3.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(b.bucket), Key: aws.String(b.key(a)), ChecksumMode: types.ChecksumModeEnabled,
	})
	switch {
	case err == nil:
		if same(head, int64(len(data)), crc) {
			return nil // stored; checked again whenever it is read
		}
	case !notFound(err):
		return b.fail("put", &a, err)
	}
	_, err = b.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket:            aws.String(b.bucket),
		Key:               aws.String(b.key(a)),
		Body:              bytes.NewReader(data),
		ContentLength:     aws.Int64(int64(len(data))),
		ContentType:       aws.String("application/octet-stream"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
		ChecksumCRC32:     aws.String(crc),
	})
	if err != nil {
		return b.fail("put", &a, err)
	}
	return nil
}

// same says whether the object head describes holds data of length n and
// CRC32 crc, as far as the server says: its length and CRC32 where it
// keeps one; its length alone where it keeps no checksum. An object with
// another checksum was not put by this store: it is put again.
func same(head *s3.HeadObjectOutput, n int64, crc string) bool {
	switch {
	case aws.ToInt64(head.ContentLength) != n:
		return false
	case head.ChecksumCRC32 != nil:
		return *head.ChecksumCRC32 == crc
	}
	return head.ChecksumCRC32C == nil && head.ChecksumCRC64NVME == nil && head.ChecksumSHA1 == nil && head.ChecksumSHA256 == nil
}

// Blob is BlobContext without a deadline.
func (b *Blobs) Blob(a addr.Addr) ([]byte, error) {
	return b.BlobContext(context.Background(), a)
}

// BlobContext returns the blob at address a, having checked that it
// hashes to a (an error wrapping ErrCorrupt if not) and is within the
// bound (ErrTooLarge). An absent blob's error wraps fs.ErrNotExist.
func (b *Blobs) BlobContext(ctx context.Context, a addr.Addr) ([]byte, error) {
	out, err := b.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(a))})
	if err != nil {
		return nil, b.fail("get", &a, err)
	}
	defer out.Body.Close()
	n := int64(-1)
	if out.ContentLength != nil {
		n = *out.ContentLength
	}
	if n > b.max {
		return nil, fmt.Errorf("s3 blob store %s: get %s: %w: the object is %d bytes, the bound is %d", b.where, a, ErrTooLarge, n, b.max)
	}
	var buf bytes.Buffer
	if n > 0 {
		buf.Grow(int(n))
	}
	m, err := buf.ReadFrom(io.LimitReader(out.Body, b.max+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("s3 blob store %s: get %s: %w", b.where, a, err)
	case m > b.max:
		return nil, fmt.Errorf("s3 blob store %s: get %s: %w: the object is over %d bytes", b.where, a, ErrTooLarge, b.max)
	case n >= 0 && m != n:
		return nil, fmt.Errorf("s3 blob store %s: get %s: %d bytes came of the %d announced", b.where, a, m, n)
	}
	data := buf.Bytes()
	if got := addr.Of(data); got != a {
		return nil, fmt.Errorf("s3 blob store %s: get %s: %w: the object's %d bytes hash to %s", b.where, a, ErrCorrupt, len(data), got)
	}
	return data, nil
}

// HasBlob says whether a blob is stored at address a (false if the
// server cannot be asked: HasBlobContext tells the two apart).
func (b *Blobs) HasBlob(a addr.Addr) bool {
	ok, _ := b.HasBlobContext(context.Background(), a)
	return ok
}

// HasBlobContext says whether a blob is stored at address a, by a HEAD of
// its object; it does not read or check the bytes.
func (b *Blobs) HasBlobContext(ctx context.Context, a addr.Addr) (bool, error) {
	_, err := b.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(a))})
	switch {
	case err == nil:
		return true, nil
	case notFound(err):
		return false, nil
	}
	return false, b.fail("stat", &a, err)
}

// notFound says whether err is the server's "no such object" (a GET's
// NoSuchKey, or a HEAD's bare 404: a HEAD has no body to say more).
func notFound(err error) bool {
	var nk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket" {
		return false
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

// denied holds the error codes that say the credentials were refused: S3's,
// and versitygw's for an access key it does not know (with a 404, where S3
// answers InvalidAccessKeyId with a 403).
var denied = map[string]bool{
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "AccessDenied": true,
	"InvalidToken": true, "ExpiredToken": true, "XAdminUserNotFound": true,
}

// fail says what went wrong in op (on the blob at a, if a is not nil),
// wrapping fs.ErrNotExist, ErrNoBucket or ErrDenied where that is why,
// and err always.
func (b *Blobs) fail(op string, a *addr.Addr, err error) error {
	what := op
	if a != nil {
		what += " " + a.String()
	}
	var ae smithy.APIError
	code := ""
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := 0
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("s3 blob store %s: %s: %w: the server has no bucket %q: %w", b.where, what, ErrNoBucket, b.bucket, err)
	case denied[code] || status == http.StatusForbidden:
		return fmt.Errorf("s3 blob store %s: %s: %w (access key ID %q): %w", b.where, what, ErrDenied, b.access, err)
	case a != nil && notFound(err):
		return fmt.Errorf("s3 blob store %s: %s: %w", b.where, what, fs.ErrNotExist)
	}
	return fmt.Errorf("s3 blob store %s: %s: %w", b.where, what, err)
}

var _ store.Collectable = (*Blobs)(nil)

// EachBlob calls f with the address of every blob in the store
// (store.Collectable): each object under PREFIX/blobs/ whose name is 64
// lowercase hex digits, listed a page (at most 1,000 keys) at a time.
func (b *Blobs) EachBlob(ctx context.Context, f func(addr.Addr) error) error {
	dir := b.prefix + "blobs/"
	p := s3.NewListObjectsV2Paginator(b.s3, &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(dir)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return b.fail("list", nil, err)
		}
		for _, o := range page.Contents {
			n := strings.TrimPrefix(aws.ToString(o.Key), dir)
			a, err := addr.Parse(addr.Prefix + n)
			if err != nil || a.Hex() != n {
				continue
			}
			if err := f(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveBlobContext removes the blob at a within ctx
// (store.Collectable); one not stored is no error (S3's DELETE of an
// absent key succeeds).
func (b *Blobs) RemoveBlobContext(ctx context.Context, a addr.Addr) error {
	// Sent once: a retry the SDK made after ctx's caller stopped
	// counting (a collector whose lease may have ended) would land late.
	_, err := b.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.key(a))},
		func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if err != nil && !notFound(err) {
		return b.fail("remove", &a, err)
	}
	return nil
}
