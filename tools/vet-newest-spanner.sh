#!/usr/bin/env bash
# Builds and vets the module against the newest cloud.google.com/go/spanner.
#
# Tests pin v1.87.0, the last client whose session pool lets the emulator
# (1.5.28, which cannot serve concurrent transactions on multiplexed
# sessions) run them. Applications are not pinned: Go's version selection
# gives lease whatever newer client they require. This catches an API change
# in a newer client before a user does. It works on copies of go.mod and
# go.sum, so the module's own files never change.
#
# SPANNER_VERSION picks the version (default: latest).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp go.mod "$tmp/go.mod"
cp go.sum "$tmp/go.sum"
"$GO" get -modfile="$tmp/go.mod" "cloud.google.com/go/spanner@${SPANNER_VERSION:-latest}" >/dev/null
resolved=$("$GO" list -modfile="$tmp/go.mod" -m -f '{{.Version}}' cloud.google.com/go/spanner)
echo "building and vetting with cloud.google.com/go/spanner $resolved (tests pin $("$GO" list -m -f '{{.Version}}' cloud.google.com/go/spanner))"
"$GO" build -modfile="$tmp/go.mod" ./...
"$GO" vet -modfile="$tmp/go.mod" ./...
