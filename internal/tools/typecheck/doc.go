// Command typecheck type-checks packages for another platform from their
// sources, without compiling them: what `GOOS=darwin go build ./...`
// checks of this module's own code (every file the platform's build
// constraints select declares and uses only what that platform has), in
// a fraction of its time, since nothing is compiled, optimised or
// written. The test script runs it for darwin and linux/arm64.
//
//	go run ./internal/tools/typecheck -goos darwin ./...
//	go run ./internal/tools/typecheck -goarch arm64 ./...
//
// It asks `go list -deps` (with GOOS, GOARCH and CGO_ENABLED=0) for the
// files each package has on that platform, then checks them in
// dependency order with go/types. The standard library's function bodies
// are not checked (the toolchain builds it for every port it lists);
// every other package is checked whole. The exit status is 1 when any
// package has an error, each printed as FILE:LINE:COL: message.
package main
