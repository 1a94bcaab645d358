#!/usr/bin/env bash
# Build SeaweedFS's `weed` (an S3-compatible server) from the Go module proxy into
# .s3-test/bin/weed, where tests/support/s3_server.py finds it (it uses moto's server, from
# PyPI, when there is none). `go install pkg@version` refuses the module (its go.mod has
# replace directives), so the module is downloaded and built in a copy of its source.
# On the project's 2-core machine the build takes 20-60 minutes (measured: 58 min under load).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
OUT=${1:-$ROOT/.s3-test/bin/weed}
if [ -x "$OUT" ]; then
    echo "$OUT"
    exit 0
fi
command -v go >/dev/null || { echo "seaweedfs.sh: go is not installed" >&2; exit 1; }
DIR=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -r "$DIR"/. "$WORK"
chmod -R u+w "$WORK"
mkdir -p "$(dirname "$OUT")"
(cd "$WORK" && GOFLAGS="-buildvcs=false" go build -o "$OUT" ./weed)
echo "$OUT"
