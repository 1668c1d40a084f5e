#!/usr/bin/env bash
# Build the service's binaries, run the SDK's tests against a real
# `sandbox serve` (tests/harness.py starts and stops it), exit non-zero on
# any failure. Needs python3, go and (for the TLS tests) openssl; run as
# root (live sandboxes' workspaces are loop-mounted filesystems).
# Idempotent: everything is made in a temporary directory, removed at exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

for tool in python3 go; do
	command -v "$tool" >/dev/null || { echo "test.sh: $tool is required" >&2; exit 2; }
done
command -v openssl >/dev/null || echo "test.sh: openssl is not installed: the TLS tests will be skipped" >&2
[ "$(id -u)" = 0 ] || echo "test.sh: not root: live sandboxes may be refused" >&2

work="$(mktemp -d "${TMPDIR:-/tmp}/opensandbox-sdk-bin.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "test.sh: building sandbox, sandbox-engine, sandbox-s1 into $work" >&2
(
	cd "$repo"
	CGO_ENABLED=0 go build -o "$work/sandbox" ./cmd/sandbox
	go build -o "$work/sandbox-engine" ./cmd/sandbox-engine
	CGO_ENABLED=0 go build -o "$work/sandbox-s1" ./cmd/sandbox-s1
)

cd "$here"
start=$(date +%s)
status=0
OPENSANDBOX_TEST_BINDIR="$work" OPENSANDBOX_TEST_ALL_OPERATIONS=1 PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
	python3 -m unittest discover -s tests -t . -v || status=$?
echo "test.sh: tests took $(( $(date +%s) - start ))s; status $status" >&2
exit "$status"
