#!/usr/bin/env bash
# Builds the Terraform CLI from its Go module, with nothing but the Go module
# proxy: `go install github.com/hashicorp/terraform@v1.6+` fails, because the
# module's go.mod replaces some packages with nested modules that its zip does
# not contain (the azurerm, consul, cos, gcs, kubernetes, oss, pg and s3 state
# backends, and internal/legacy, which only they use). This copies the module,
# drops those backends and their replace directives, and builds the rest. The
# result is the released CLI without those eight backends, which the tests
# never use.
#
# usage: build-terraform.sh VERSION OUTPUT_DIR
set -euo pipefail
version=$1
out=$2
go=${GO:-go}

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir=$(cd "$work" && "$go" mod download -json "github.com/hashicorp/terraform@v$version" | grep '"Dir"' | cut -d'"' -f4)
if [ -z "$dir" ]; then
	echo "build-terraform.sh: cannot download github.com/hashicorp/terraform@v$version from the Go module proxy" >&2
	exit 1
fi
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
sed -i.orig -E '/backend(Azure|Consul|Cos|GCS|Kubernetes|OCI|OSS|Pg|S3)[ .]/d' internal/backend/init/init.go
# godebug tlskyber is unknown to Go 1.24 and later.
sed -i.orig -E '\#github.com/hashicorp/terraform/internal/#d; /^godebug tlskyber/d' go.mod
GOFLAGS=-mod=mod "$go" build -trimpath -ldflags "-s -w -X github.com/hashicorp/terraform/version.dev=no" -o "$out/terraform" .
"$out/terraform" version
