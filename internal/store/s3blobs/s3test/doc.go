// Package s3test starts a real S3-compatible server for tests:
// versitygw's POSIX gateway (Apache-2.0), the version scripts/deps
// builds from the Go module proxy into .cache/thirdparty, serving a
// temporary directory on a loopback port, stopped and removed at the
// test's end. Tests of the S3 blob store and of a cluster whose bundles
// are kept in S3 run against it.
package s3test
