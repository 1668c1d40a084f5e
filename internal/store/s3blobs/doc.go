// Package s3blobs is a content-addressed blob store (store.Blobs) in a
// bucket of an S3-compatible object store: the shared backend for blobs
// when runs outgrow one machine. It is named by a URL:
//
//	s3://BUCKET[/PREFIX]?endpoint=http://HOST:PORT[&region=R][&path-style=true]
//
// with the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
// never in the URL.
//
// Invariants:
//
//   - The blob at address a is the object PREFIX + "blobs/" + a.Hex()
//     (64 lower-case hex digits), nothing else, and nothing else is
//     written.
//   - A put sends bytes only after checking that they hash to the
//     address and are within the bound; it is one PUT of a known length,
//     never a multipart upload, so the object appears whole or not at
//     all: a put cancelled, cut off or whose server dies leaves no object.
//   - A read returns bytes only after checking that they hash to the
//     address (ErrCorrupt, naming it, if not), and never reads more than
//     the bound (MaxBlob, 1 GiB, or Config.MaxSize below it) whatever the
//     server announces. An absent blob's error wraps fs.ErrNotExist; a
//     missing bucket's wraps ErrNoBucket; refused credentials' wrap
//     ErrDenied.
//   - Opening a store checks that the bucket answers the credentials, so
//     a wrong URL or key fails at once, not at the first blob.
//
// Why aws-sdk-go-v2 (github.com/aws/aws-sdk-go-v2/service/s3) and not
// minio-go: both are Apache-2.0 and both are served by the module proxy,
// but minio-go v7.4.1 would move modules the whole tree shares
// (golang.org/x/net, x/crypto, protobuf, cpuid) to new versions, while the
// AWS SDK adds only its own modules and changes none; and the SDK's
// PutObject is exactly one PUT, where minio-go turns a large put into a
// multipart upload unless told not to. Its errors are typed (NoSuchKey,
// NotFound, an API error code), which is what the sentinels above are
// mapped from, in one place (fail).
//
// The tests run against a real S3 server, versitygw's POSIX gateway
// (github.com/versity/versitygw, Apache-2.0), built from its library by
// third_party/s3gw (scripts/versitygw, which scripts/deps runs) into
// $SANDBOX_THIRDPARTY and started by each test on a loopback port.
package s3blobs
