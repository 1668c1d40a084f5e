// Command s3gw is versitygw's POSIX gateway (github.com/versity/versitygw,
// Apache-2.0: LICENSE beside the binary scripts/versitygw builds), the
// real S3 server the S3 blob store's tests run against, built from
// versitygw's own library (embedgw, backend/posix) without the backends
// the tests never use (Azure, S3 proxy, ScoutFS, plugins, RDMA): half
// the packages versitygw's command compiles, in each fresh clone.
//
// It takes the flags of `versitygw ... posix ROOT` that the tests give,
// with versitygw's defaults for the rest:
//
//	s3gw --port 127.0.0.1:7070 --access KEY --secret SECRET [--region R] [--quiet] posix ROOT
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "s3gw:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("s3gw", flag.ContinueOnError)
	port := fl.String("port", ":7070", "the address the S3 API listens on")
	access := fl.String("access", "", "the root user's access key (required)")
	secret := fl.String("secret", "", "the root user's secret key (required)")
	region := fl.String("region", "us-east-1", "the region told to clients")
	quiet := fl.Bool("quiet", false, "no banner, no access log on the terminal")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 2 || fl.Arg(0) != "posix" {
		return errors.New("usage: s3gw --port ADDR --access KEY --secret SECRET [--region R] [--quiet] posix ROOT")
	}
	root := fl.Arg(1)
	// versitygw's defaults (cmd/versitygw, cmd/internal/gwcli/posix.go).
	opts := posix.PosixOpts{Concurrency: 5000, IOBufferSize: 1 << 20, CopyObjectThreshold: 5 << 30}
	opts.SetNewDirPerm(fs.FileMode(0o755))
	opts.SetNewFilePerm(fs.FileMode(0o644))
	if err := (meta.XattrMeta{}).Test(root); err != nil {
		return fmt.Errorf("xattr check failed: %w", err)
	}
	be, err := posix.New(root, meta.XattrMeta{}, opts)
	if err != nil {
		return fmt.Errorf("init posix backend: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = embedgw.RunVersityGW(ctx, be, &embedgw.Config{
		RootUserAccess:      *access,
		RootUserSecret:      *secret,
		Region:              *region,
		Ports:               []string{*port},
		MaxConnections:      250000,
		MaxRequests:         100000,
		AdminMaxConnections: 250000,
		AdminMaxRequests:    100000,
		MultipartMaxParts:   10000,
		Quiet:               *quiet,
		IAMCacheTTL:         120,
		IAMCachePrune:       3600,
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
