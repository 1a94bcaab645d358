#!/usr/bin/env bash
# Build the Versity S3 Gateway (`versitygw`, Apache-2.0: an S3 server over a POSIX directory,
# with conditional writes) from the Go module proxy into .s3-test/bin/versitygw, where
# tests/support/s3_server.py finds it. Built once; `make test` calls this (`make test-quick`
# runs no S3 test).
# On the project's 2-core machine the first build takes 3-7 minutes (6 min 20 s measured under
# load 8, module downloads included); later calls return at once.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=${VERSITYGW_VERSION:-v1.8.0}
OUT=${1:-$ROOT/.s3-test/bin/versitygw}
if [ -x "$OUT" ]; then
    echo "$OUT"
    exit 0
fi
command -v go >/dev/null || { echo "versitygw.sh: go is not installed (the S3 tests need it)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
# Built beside $OUT and renamed into place: an interrupted build leaves no binary that the
# check above would take for a built one.
BUILD=$(mktemp -d "$(dirname "$OUT")/.build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
echo "versitygw.sh: building versitygw $VERSION (once; a few minutes)" >&2
GOBIN="$BUILD" GOFLAGS="-buildvcs=false" go install "github.com/versity/versitygw/cmd/versitygw@$VERSION"
mv "$BUILD/versitygw" "$OUT"
echo "$OUT"
