#!/usr/bin/env bash
# Readers of a bucket written by treesync (docs/scale.md, option b): moto on 127.0.0.1, one
# `treesync sync` of a repository holding an executable and a symlink, then what s3fs-fuse and
# rclone show of it. Run as root from the workspace after `cargo build -p treesync-cli`;
# needs `apt-get install -y s3fs rclone` and moto (TREESYNC_MOTO_SERVER, default in lib.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
W=${1:-/tmp/treesync-scale-readers}
PORT=${PORT:-45123}
fusermount -u "$W/s3fs" 2>/dev/null || true
fusermount -u "$W/rclone" 2>/dev/null || true
rm -rf "$W" && mkdir -p "$W"/{s3fs,rclone,copy}
cd "$W"

start_moto
S3FS_PID= RCLONE_PID=
cleanup() {
  fusermount -u "$W/s3fs" 2>/dev/null || true
  fusermount -u "$W/rclone" 2>/dev/null || true
  [ -n "$RCLONE_PID" ] && kill "$RCLONE_PID" 2>/dev/null || true
  kill "$MOTO_PID" 2>/dev/null || true
}
trap cleanup EXIT

# The repository: an executable script, a plain file, a symlink to each, a directory link.
git init -q -b main repo
mkdir -p repo/bin repo/docs
printf '#!/bin/sh\necho hello from run.sh\n' >repo/bin/run.sh && chmod +x repo/bin/run.sh
echo 'plain text' >repo/docs/readme.txt
ln -s bin/run.sh repo/run && ln -s ../docs/readme.txt repo/bin/readme && ln -s docs repo/doclink
git -C repo add -A && commit repo -m one

echo "\$ treesync sync --repo repo --ref main --target s3://bucket/site --allow-http"
"$TREESYNC" sync --repo repo --ref main --target s3://bucket/site --allow-http

echo; echo "# what the bucket holds (mode metadata, body of the links)"
for key in bin/run.sh docs/readme.txt run bin/readme doclink; do
  mode=$(curl -sI --aws-sigv4 aws:amz:us-east-1:s3 --user testing:testing "http://127.0.0.1:$PORT/bucket/site/$key" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-amz-meta-mode"{print $2}')
  body=$(curl -s --aws-sigv4 aws:amz:us-east-1:s3 --user testing:testing "http://127.0.0.1:$PORT/bucket/site/$key" | head -c 40 | tr '\n' ' ')
  printf '%-16s x-amz-meta-mode=%-6s body=%s\n' "$key" "$mode" "$body"
done

echo; echo "# s3fs-fuse $(s3fs --version 2>&1 | grep -o 'V[0-9.]*' | head -1)"
echo "\$ s3fs bucket:/site s3fs -o url=http://127.0.0.1:$PORT,use_path_request_style,passwd_file=passwd"
mount_s3fs "$W/s3fs"
echo "\$ ls -l s3fs s3fs/bin s3fs/docs"
ls -l s3fs s3fs/bin s3fs/docs | sed 's/ [A-Z][a-z][a-z] .. ..:.. / DATE /'
echo "\$ s3fs/bin/run.sh; cat s3fs/run; readlink s3fs/run; ls s3fs/doclink/"
s3fs/bin/run.sh || echo "(exit $?)"
cat s3fs/run || echo "(exit $?)"
readlink s3fs/run || echo "(exit $?)"
ls s3fs/doclink/ || echo "(exit $?)"

echo; echo "# rclone $(rclone version 2>/dev/null | head -1 | awk '{print $2}')"
cat >rclone.conf <<EOF
[moto]
type = s3
provider = Other
access_key_id = testing
secret_access_key = testing
endpoint = http://127.0.0.1:$PORT
EOF
export RCLONE_CONFIG=$W/rclone.conf
unset AWS_CA_BUNDLE  # rclone 1.60 cannot load a CA bundle into its transport (and needs none here)
echo "\$ rclone lsl moto:bucket/site"
rclone lsl moto:bucket/site | sed 's/ 20..-..-.. ..:..:..\.[0-9]* / DATE /'
echo "\$ rclone copy --links moto:bucket/site copy  (then ls -l copy copy/bin)"
rclone copy --links moto:bucket/site copy 2>&1 | tail -3 || true
ls -l copy copy/bin | sed 's/ [A-Z][a-z][a-z] .. ..:.. / DATE /'
echo "\$ rclone copy -M moto:bucket/site copy-m  (metadata: mode)"
rclone copy -M moto:bucket/site copy-m 2>&1 | tail -3 || true
ls -l copy-m copy-m/bin | sed "s/ [A-Z][a-z][a-z] .. ..:.. / DATE /"
echo "$ rclone mount moto:bucket/site rclone --links --read-only  (then ls -l, run, readlink)"
rclone mount moto:bucket/site "$W/rclone" --links --read-only --daemon-wait 0 >rclone-mount.log 2>&1 &
RCLONE_PID=$!
for _ in $(seq 100); do mountpoint -q rclone && break; sleep 0.1; done
ls -l rclone rclone/bin | sed 's/ [A-Z][a-z][a-z] .. ..:.. / DATE /'
rclone/bin/run.sh || echo "(exit $?)"
readlink rclone/run || echo "(exit $?)"

echo; echo "# an update while both are mounted: readme.txt grows, run.sh loses its exec bit, new.txt appears"
cat s3fs/docs/readme.txt rclone/docs/readme.txt >/dev/null  # both have read it once
echo 'plain text, second version' >repo/docs/readme.txt && chmod -x repo/bin/run.sh && echo new >repo/new.txt
git -C repo add -A && commit repo -m two
"$TREESYNC" sync --repo repo --ref main --target s3://bucket/site --allow-http
for m in s3fs rclone; do
  echo "\$ cat $m/docs/readme.txt; ls -l $m/bin/run.sh; ls $m  (right after the sync)"
  cat $m/docs/readme.txt || echo " (exit $?)"; ls -l $m/bin/run.sh | cut -d' ' -f1,5; ls $m | tr '\n' ' '; echo
done
