#!/usr/bin/env bash
# Builds the OpenTofu CLI from its Go module, with nothing but the Go module
# proxy: `go install github.com/opentofu/opentofu/cmd/tofu@v1.11.5` fails,
# because the module's go.mod replaces github.com/hashicorp/hcl/v2 with
# OpenTofu's fork, and go install refuses a module with replace directives.
# Built inside a copy of the module, the replace applies, and nothing else
# is missing (OpenTofu has no nested modules). The result is the released
# CLI.
#
# usage: build-opentofu.sh VERSION OUTPUT_DIR
set -euo pipefail
version=$1
out=$2
go=${GO:-go}

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir=$(cd "$work" && "$go" mod download -json "github.com/opentofu/opentofu@v$version" | grep '"Dir"' | cut -d'"' -f4)
if [ -z "$dir" ]; then
	echo "build-opentofu.sh: cannot download github.com/opentofu/opentofu@v$version from the Go module proxy" >&2
	exit 1
fi
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
GOFLAGS=-mod=mod "$go" build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$out/tofu" ./cmd/tofu
"$out/tofu" version
