# Sourced by the scripts: the environment every build and test needs.
# Go comes with the machine; everything else the project installs itself.
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
command -v go >/dev/null || { echo "Go is not installed (want Go 1.26 at /usr/local/go)" >&2; exit 1; }
