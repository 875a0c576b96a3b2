#!/usr/bin/env bash
# Builds the kubernetes module the way an application installs it: from a
# module proxy, without this repository's replace directives. It makes a
# local file proxy holding the root module and the kubernetes module at
# VERSION (what tagging vVERSION and kubernetes/vVERSION on this commit
# publishes), then, in a fresh module, `go get`s the kubernetes module at
# that version with each client-go version given, and builds and vets a
# program that runs client-go's LeaderElector on resourcelock.Lock.
# Everything else comes from the module cache (GOMODCACHE/cache/download)
# or, when missing there, from GOPROXY.
#
#   tools/kubernetes-install-check.sh 0.1.0 v0.31.4 v0.37.2
#
# The release procedure runs it with the lowest and highest client-go the
# module supports (README, "Releasing"); CI runs it (make kubernetes-install-check).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v${1#v}
shift
[ $# -gt 0 ] || { echo "usage: $0 VERSION CLIENT_GO_VERSION..." >&2; exit 2; }
GO=${GO:-go}
root=github.com/spannerlock/terraform-provider-spannerlock
req=$(sed -n "s#^\t$root \(v[^ ]*\)\$#\1#p" kubernetes/go.mod)
# The application states the lowest Go the kubernetes module's go.mod allows:
# go get and go mod tidy raise it if any requirement needs more, which fails
# the check unless client-go itself needs it (v0.37 needs go 1.26), and go vet
# then flags any use of the standard library newer than it (its stdversion
# analyzer).
golowest=$(sed -n 's#^go \([0-9.]*\)$#\1#p' kubernetes/go.mod)
[ "$req" = "$version" ] || { echo "kubernetes/go.mod requires $root $req, not $version: tag both modules at one version" >&2; exit 1; }

tmp=$(mktemp -d); [ -z "${KEEP:-}" ] || echo "keeping $tmp"
[ -n "${KEEP:-}" ] || trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
proxy=$tmp/proxy

# zipmodule MODULE DIR: MODULE at $version from the committed files of DIR
# ("" for the repository's root), leaving out nested modules (directories
# with a go.mod of their own), as the go command's own zips do.
zipmodule() {
	local mod=$1 dir=$2 src
	src=$(mktemp -d -p "$tmp")
	mkdir -p "$tmp/stage/$mod@$version" "$proxy/$mod/@v"
	git archive --format=tar "HEAD:$dir" | tar -x -C "$src"
	( cd "$src" && find . -mindepth 2 -name go.mod -printf '%h\n' ) | while read -r nested; do rm -rf "${src:?}/$nested"; done
	cp -R "$src/." "$tmp/stage/$mod@$version"
	( cd "$tmp/stage" && zip -qrX "$proxy/$mod/@v/$version.zip" "$mod@$version" )
	cp "$src/go.mod" "$proxy/$mod/@v/$version.mod"
	printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(git log -1 --format=%cI)" >"$proxy/$mod/@v/$version.info"
	echo "$version" >"$proxy/$mod/@v/list"
}
zipmodule "$root" ""
zipmodule "$root/kubernetes" kubernetes

# A module cache of its own: the go command never downloads a version it
# has again, so a shared cache would keep an earlier run's v$version.
export GOPROXY="file://$proxy,file://$($GO env GOMODCACHE)/cache/download,$($GO env GOPROXY)"
export GOMODCACHE=$tmp/modcache GONOSUMDB=$root GOFLAGS=-mod=mod GOWORK=off
for cg in "$@"; do
	app=$tmp/app-$cg
	mkdir -p "$app"
	cat >"$app/main.go" <<'GO'
package main

import (
	"context"
	"time"

	"cloud.google.com/go/spanner"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
)

func main() {
	ctx := context.Background()
	db, err := spanner.NewClient(ctx, "projects/p/instances/i/databases/d")
	if err != nil {
		panic(err)
	}
	lock, err := resourcelock.New(db, "locks", "app", "pod_uuid",
		resourcelock.WithElectorTimings(15*time.Second, 10*time.Second, 2*time.Second))
	if err != nil {
		panic(err)
	}
	cfg := leaderelection.LeaderElectionConfig{Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}}
	if err := lock.Check(cfg); err != nil {
		panic(err)
	}
	leaderelection.RunOrDie(ctx, cfg)
}
GO
	( cd "$app" &&
		$GO mod init example.com/app >/dev/null 2>&1 &&
		$GO mod edit -go="$golowest" &&
		$GO get "$root/kubernetes@$version" "k8s.io/client-go@$cg" &&
		$GO mod tidy &&
		got=$($GO list -m -f '{{.Version}}' k8s.io/client-go) &&
		{ [ "$got" = "$cg" ] || { echo "asked for client-go $cg, the build selected $got" >&2; exit 1; }; } &&
		gotgo=$(sed -n 's#^go \([0-9.]*\)$#\1#p' go.mod) &&
		cggo=$($GO list -m -f '{{.GoVersion}}' k8s.io/client-go) &&
		want=$(printf '%s\n' "$golowest" "$cggo" | sort -V | tail -1) &&
		{ [ "$gotgo" = "$want" ] || { echo "the application needs go $gotgo, above both the go $golowest kubernetes/go.mod states and client-go $cg's go $cggo" >&2; exit 1; }; } &&
		{ ! $GO list -m sigs.k8s.io/controller-runtime >/dev/null 2>&1 || { echo "controller-runtime is among the requirements" >&2; exit 1; }; } &&
		$GO build ./... && $GO vet ./... &&
		echo "ok: $root/kubernetes@$version builds from a proxy with client-go $cg at go $gotgo" ) || { echo "FAIL: installing $root/kubernetes@$version with client-go $cg" >&2; exit 1; }
done
