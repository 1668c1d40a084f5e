#!/usr/bin/env bash
# Builds the SDK and runs its tests against a real service:
#   npm ci (from the lock; offline when the cache has it), tsc, the three
#   Go binaries into a temporary directory, then node's test runner, which
#   starts `sandbox serve` with a temporary SANDBOX_HOME (test/harness.ts)
#   and stops it at the end. Idempotent; leaves nothing behind; exits
#   non-zero on any failure. Run as root (live S1 sandboxes need it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

if [ "$(id -u)" != 0 ]; then
	echo "test.sh: warning: not root; live sandboxes may be refused" >&2
fi

bin="$(mktemp -d "${TMPDIR:-/tmp}/sdk-ts-bin.XXXXXX")"
cleanup() { rm -rf "$bin"; }
trap cleanup EXIT

echo "== npm ci"
if ! npm ci --prefer-offline --no-audit --no-fund; then
	if [ -x node_modules/.bin/tsc ]; then
		echo "test.sh: npm ci failed (offline?); using the node_modules already installed" >&2
	else
		echo "test.sh: npm ci failed and no node_modules to fall back on" >&2
		exit 1
	fi
fi

echo "== tsc"
rm -rf dist build
npx --no-install tsc -p tsconfig.json
npx --no-install tsc -p tsconfig.test.json

echo "== go build (into $bin)"
(
	cd "$repo"
	CGO_ENABLED=0 go build -o "$bin/sandbox" ./cmd/sandbox
	go build -o "$bin/sandbox-engine" ./cmd/sandbox-engine
	CGO_ENABLED=0 go build -o "$bin/sandbox-s1" ./cmd/sandbox-s1
)

echo "== node --test"
start=$(date +%s)
SANDBOX_SDK_BIN="$bin" node --test --test-timeout=300000 --test-reporter=spec build/test/all.test.js
echo "== passed in $(( $(date +%s) - start )) s"
