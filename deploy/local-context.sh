#!/usr/bin/env bash
# deploy/local-context.sh DIR: fills DIR with the build context of
# deploy/Dockerfile.local (a static workrouter binary, the host's CA
# certificates, passwd and group with distroless's nonroot user 65532).
# Run it from anywhere; it builds from this repository.
set -euo pipefail
dir=$1
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
(cd "$root" && CGO_ENABLED=0 go build -ldflags="-s -w" -o "$dir/workrouter" ./cmd/workrouter)
cp /etc/ssl/certs/ca-certificates.crt "$dir/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/group"
