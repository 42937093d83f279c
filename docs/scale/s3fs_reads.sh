#!/usr/bin/env bash
# What one s3fs reader costs the bucket (docs/scale.md, option b): a 200-file tree synced by
# treesync to moto, mounted with s3fs defaults; requests counted in moto's log for a walk
# (`ls -lR`), a read of every file, the same again warm, and again after a 10-file sync.
# Run as root from the workspace after `cargo build -p treesync-cli`; needs s3fs and moto.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
W=${1:-/tmp/treesync-scale-s3fs}
PORT=${PORT:-45125}
fusermount -u "$W/mnt" 2>/dev/null || true
rm -rf "$W" && mkdir -p "$W/mnt" && cd "$W"
start_moto
trap 'fusermount -u "$W/mnt" 2>/dev/null || true; kill $MOTO_PID 2>/dev/null || true' EXIT

git init -q -b main repo
for d in $(seq -w 0 9); do
  mkdir -p repo/d$d
  for f in $(seq -w 0 19); do seq 1 200 | sed "s/^/d$d f$f /" >repo/d$d/f$f.txt; done
done
git -C repo add -A && commit repo -m one
"$TREESYNC" sync -q --repo repo --ref main --target s3://bucket/site --allow-http
mount_s3fs "$W/mnt"

count() { # requests in moto's log since line $1: object HEAD/GET/PUT, listings, others
  tail -n +"$(($1 + 1))" moto.log | sed 's/\x1b\[[0-9;]*m//g' | grep -o '"[A-Z]* /bucket[^ ]*' | awk '
    { k = substr($1, 2); if (k == "GET" && $2 !~ "^/bucket/site/") k = "LIST"; m[k]++; n++ }
    END { for (k in m) printf "%s %d, ", k, m[k]; printf "total %d", n }'
}
step() { # label, command
  local mark; mark=$(wc -l <moto.log)
  eval "$2" >/dev/null
  sleep 0.5
  printf '| %s | `%s` | %s |\n' "$1" "$2" "$(count "$mark")"
}
echo "| step | command | S3 requests |"
echo "|---|---|---|"
step "walk, cold" "ls -lR mnt"
step "read all 200, cold" "cat mnt/d*/f*.txt"
step "walk, warm" "ls -lR mnt"
step "read all 200, warm" "cat mnt/d*/f*.txt"
for f in $(seq 0 9); do echo changed >>"repo/d$f/f0$f.txt"; done
commit repo -am two
mark=$(wc -l <moto.log)
"$TREESYNC" sync -q --repo repo --ref main --target s3://bucket/site --allow-http
printf '| treesync sync of a 10-file change (the publisher) | | %s |\n' "$(count "$mark")"
step "walk after the sync" "ls -lR mnt"
step "read all 200 after the sync" "cat mnt/d*/f*.txt"
