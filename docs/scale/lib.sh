# What the shell scripts of docs/scale share (sourced, not run): the treesync binary, a moto
# server with the bucket `bucket`, and an s3fs-fuse mount of its `site` prefix. The scripts
# run as root from the workspace after `cargo build -p treesync-cli`.
MOTO=${TREESYNC_MOTO_SERVER:-/opt/treesync-moto/bin/moto_server}
TREESYNC=${TREESYNC:-$PWD/target/debug/treesync}

# start_moto: moto on 127.0.0.1:$PORT, logging to moto.log here (its pid in MOTO_PID), once it
# answers, with the bucket `bucket` made and the AWS_* variables of treesync set. A moto that
# makes no bucket is stopped here (the caller's trap is set only after).
start_moto() {
  "$MOTO" -H 127.0.0.1 -p "$PORT" >moto.log 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
  curl -s -X PUT "http://127.0.0.1:$PORT/bucket" >/dev/null || { kill "$MOTO_PID"; return 1; }
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
  export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT
}

# mount_s3fs DIR: bucket:/site of moto mounted at DIR (absolute) by s3fs-fuse with its
# defaults, its credentials in ./passwd; returns once DIR is a mount point.
mount_s3fs() {
  echo 'testing:testing' >passwd && chmod 600 passwd
  s3fs bucket:/site "$1" -o "url=http://127.0.0.1:$PORT,use_path_request_style,passwd_file=$PWD/passwd"
  for _ in $(seq 100); do mountpoint -q "$1" && break; sleep 0.1; done
}

# commit REPO ARGS: `git commit -q ARGS` in REPO, as the author and committer t <t@e>.
commit() {
  local repo=$1
  shift
  git -C "$repo" -c user.name=t -c user.email=t@e commit -q "$@"
}
