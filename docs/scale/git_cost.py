#!/usr/bin/env python3
"""What one polling mirror costs a git server (docs/scale.md, option a).

Builds bare repositories with real git, serves them with `git daemon` on 127.0.0.1 behind a
byte-counting TCP proxy, and measures:
  * bytes on the wire and connections for one `git ls-remote URL refs/heads/main`, protocol v2
    (ls-refs with a ref-prefix) and v0 (the server advertises every ref), at 10 and 1,000 refs;
  * server CPU per ls-remote: the daemon's reaped children's user+sys time (git daemon forks,
    the fork runs git-upload-pack and waits) over N requests;
  * egress per push: `git fetch` of a 10-file change into a cache one commit behind.

Usage: python3 docs/scale/git_cost.py [--requests 300] [--dir /tmp/treesync-scale-git]
Needs only git and python3.
"""

import argparse
import http.server
import os
import shutil
import socket
import subprocess
import threading
import time

from lib import commit, free_port, git

CLK = os.sysconf("SC_CLK_TCK")


class CountingProxy:
    """A TCP proxy that counts connections and bytes each way."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.reset()
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        with self.lock:
            self.connections = 0
            self.up = 0  # client -> server
            self.down = 0  # server -> client
            self.open = 0

    def wait_idle(self):
        deadline = time.time() + 30
        while self.open and time.time() < deadline:
            time.sleep(0.01)

    def _accept(self):
        while True:
            c, _ = self.sock.accept()
            s = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.connections += 1
                self.open += 2
            threading.Thread(target=self._pipe, args=(c, s, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, "down"), daemon=True).start()

    def _pipe(self, src, dst, way):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self.lock:
                    setattr(self, way, getattr(self, way) + len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            with self.lock:
                self.open -= 1


class HttpBackend(http.server.BaseHTTPRequestHandler):
    """Smart HTTP: each request runs `git http-backend` as a CGI, as a web server in front of a
    git server does; counts requests and bytes each way (bodies and headers)."""

    root = None
    stats = {"requests": 0, "up": 0, "down": 0, "cpu": 0.0}
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _serve(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        path, _, query = self.path.partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=self.root, GIT_HTTP_EXPORT_ALL="1", PATH_INFO=path,
                   QUERY_STRING=query, REQUEST_METHOD=self.command, REMOTE_ADDR="127.0.0.1",
                   CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                   HTTP_GIT_PROTOCOL=self.headers.get("Git-Protocol", ""))
        before = os.times()
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        after = os.times()
        head, _, payload = out.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            k, _, v = line.partition(": ")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        st = HttpBackend.stats
        st["requests"] += 1
        st["up"] += len(body) + sum(len(k) + len(v) + 4 for k, v in self.headers.items()) + len(self.requestline) + 2
        st["down"] += len(payload) + sum(len(k) + len(v) + 4 for k, v in headers) + 60
        st["cpu"] += (after.children_user - before.children_user) + (after.children_system - before.children_system)

    do_GET = _serve
    do_POST = _serve


def children_cpu(pid):
    """User+sys seconds of the reaped children of pid (fields cutime, cstime of /proc/pid/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / CLK


def make_repo(root, name, refs, files, namespace="refs/tags/v"):
    """A bare repository: `files` files of ~4 KiB in 40 directories, main plus refs-1 more refs
    (`namespace`N: release tags, or pull-request refs as forges keep them)."""
    bare = os.path.join(root, name + ".git")
    work = os.path.join(root, name + "-work")
    git("init", "-q", "-b", "main", work)
    for i in range(files):
        d = os.path.join(work, f"dir{i % 40:02}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i:05}.txt"), "w") as f:
            f.write(f"file {i}\n" + "".join(f"line {j} of file {i}: some text\n" for j in range(120)))
    git("add", "-A", cwd=work)
    commit(work, "-m", "initial")
    head = git("rev-parse", "HEAD", cwd=work).decode().strip()
    # refs-1 more refs: lightweight tags, written in one update-ref transaction.
    git("clone", "-q", "--bare", work, bare)
    stdin = "".join(f"create {namespace}{i:05} {head}\n" for i in range(refs - 1))
    if stdin:
        git("update-ref", "--stdin", cwd=bare, input=stdin.encode())
    git("pack-refs", "--all", cwd=bare)
    return bare, work


def push_change(work, bare, n_files, tag):
    """A commit changing n_files files (one line each), pushed to bare."""
    for i in range(n_files):
        p = os.path.join(work, f"dir{(i * 7) % 40:02}", f"file{i * 7:05}.txt")
        with open(p, "a") as f:
            f.write(f"changed by {tag}\n")
    commit(work, "-am", tag)
    git("push", "-q", bare, "main", cwd=work)


# How the ref is asked for: plain (every ref advertised, matched on the client), the way
# treesync's remote asks for a rev `main` (ref prefixes refs/heads/ and refs/tags/, which v2
# sends to the server), and branches only.
ASKS = {
    "plain": ["ls-remote", "{url}", "refs/heads/main"],
    "treesync": ["ls-remote", "--refs", "--heads", "--tags", "{url}", "refs/tags/main", "refs/heads/main"],
    "heads": ["ls-remote", "--refs", "--heads", "{url}", "refs/heads/main"],
}


def ls_remote(url, version, ask="plain"):
    args = [a.replace("{url}", url) for a in ASKS[ask]]
    return subprocess.run(["git", "-c", f"protocol.version={version}", *args],
                          check=True, capture_output=True).stdout


def daemon_pid(wrapper):
    """`git daemon` runs git-daemon as a child of the git wrapper: the pid that reaps the forks."""
    with open(f"/proc/{wrapper}/task/{wrapper}/children") as f:
        kids = f.read().split()
    return int(kids[0]) if kids else wrapper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300, help="ls-remote calls for the CPU figure")
    ap.add_argument("--dir", default="/tmp/treesync-scale-git")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--fetches", type=int, default=50, help="fetches for the CPU-per-fetch figure")
    ap.add_argument("--only", default="ls,cpu,http,push", help="sections to run (comma-separated)")
    a = ap.parse_args()
    only = a.only.split(",")

    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    print(f"git {git('--version').decode().split()[-1]}; repos of {a.files} files")
    repos = {}
    repos["10"] = make_repo(a.dir, "r10", 10, a.files)
    repos["1000 (999 tags)"] = make_repo(a.dir, "rtags", 1000, a.files)
    repos["1000 (999 pull refs)"] = make_repo(a.dir, "rpull", 1000, a.files, "refs/pull/")
    names = {"10": "r10", "1000 (999 tags)": "rtags", "1000 (999 pull refs)": "rpull"}

    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={a.dir}",
                               "--listen=127.0.0.1", f"--port={port}", a.dir],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        proxy = CountingProxy(port)

        if "ls" in only:
            print("\n## one ls-remote of main")
            print("| refs | ask | protocol | connections | bytes client->server | bytes server->client |")
            print("|---|---|---|---:|---:|---:|")
            for refs, name in names.items():
                url = f"git://127.0.0.1:{proxy.port}/{name}.git"
                for ask in ASKS:
                    for v in (2, 0):
                        ls_remote(url, v, ask)  # warm
                        proxy.wait_idle()
                        proxy.reset()
                        out = ls_remote(url, v, ask)
                        assert out.endswith(b"\trefs/heads/main\n"), out
                        proxy.wait_idle()
                        print(f"| {refs} | {ask} | v{v} | {proxy.connections} | {proxy.up} | {proxy.down} |")

        if "cpu" in only:
            print(f"\n## server CPU per ls-remote (daemon's reaped children, {a.requests} calls)")
            print("| refs | ask | protocol | server CPU ms per call | client wall ms per call |")
            print("|---|---|---|---:|---:|")
            reaper = daemon_pid(daemon.pid)
            for refs, name in names.items():
                url = f"git://127.0.0.1:{port}/{name}.git"
                for ask, v in (("treesync", 2), ("heads", 2), ("plain", 0)):
                    before = children_cpu(reaper)
                    t0 = time.monotonic()
                    for _ in range(a.requests):
                        ls_remote(url, v, ask)
                    wall = time.monotonic() - t0
                    time.sleep(0.5)  # let the daemon reap the last child
                    cpu = children_cpu(reaper) - before
                    print(f"| {refs} | {ask} | v{v} | {cpu * 1000 / a.requests:.2f} | {wall * 1000 / a.requests:.1f} |")

        if "http" in only:
            print("\n## smart HTTP (git http-backend as CGI): one ls-remote of main, as treesync asks")
            print("| refs | protocol | HTTP requests | bytes client->server | bytes server->client | server CPU ms |")
            print("|---|---|---:|---:|---:|---:|")
            HttpBackend.root = a.dir
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HttpBackend)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            for refs, name in names.items():
                url = f"http://127.0.0.1:{httpd.server_address[1]}/{name}.git"
                for v in (2, 0):
                    ls_remote(url, v, "treesync")  # warm
                    n = 20
                    HttpBackend.stats.update(requests=0, up=0, down=0, cpu=0.0)
                    for _ in range(n):
                        out = ls_remote(url, v, "treesync")
                        assert out.endswith(b"\trefs/heads/main\n"), out
                    st = HttpBackend.stats
                    print(f"| {refs} | v{v} | {st['requests'] / n:.0f} | {st['up'] / n:.0f} | {st['down'] / n:.0f} | "
                          f"{st['cpu'] * 1000 / n:.1f} |")
            httpd.shutdown()

        if "push" in only:
            print("\n## egress per push: fetch of main into a cache one commit behind (repo of 1,000 refs, 999 tags)")
            print("| change | protocol | connections | bytes client->server | bytes server->client | pack objects |")
            print("|---|---|---:|---:|---:|---:|")
            bare, work = repos["1000 (999 tags)"]
            url = f"git://127.0.0.1:{proxy.port}/rtags.git"
            for n in (1, 10, 100):
                for v in (2, 0):
                    cache = os.path.join(a.dir, f"cache-{n}-v{v}")
                    git("clone", "-q", "--bare", "--single-branch", "--branch", "main", "--no-tags", bare, cache)
                    push_change(work, bare, n, f"push-{n}-v{v}")
                    proxy.wait_idle()
                    proxy.reset()
                    err = subprocess.run(["git", "-c", f"protocol.version={v}", "fetch", "--no-tags", url,
                                          "+refs/heads/main:refs/heads/main"], cwd=cache, check=True,
                                         capture_output=True).stderr
                    proxy.wait_idle()
                    objects = git("rev-list", "--objects", "HEAD~1..HEAD", cwd=cache).decode().count("\n")
                    print(f"| {n} files | v{v} | {proxy.connections} | {proxy.up} | {proxy.down} | {objects} |")

            # Server CPU of the fetch a push sets off on every host: N caches one commit behind
            # (local clones, made before the push), each fetching the 10-file change once.
            print(f"\n## server CPU per fetch of a 10-file change ({a.fetches} caches one commit behind)")
            caches = []
            for i in range(a.fetches):
                cache = os.path.join(a.dir, f"fcache-{i}")
                git("clone", "-q", "--bare", "--single-branch", "--branch", "main", "--no-tags", bare, cache)
                caches.append(cache)
            push_change(work, bare, 10, "push-cpu")
            reaper = daemon_pid(daemon.pid)
            direct = f"git://127.0.0.1:{port}/rtags.git"
            before = children_cpu(reaper)
            for cache in caches:
                subprocess.run(["git", "-c", "protocol.version=2", "fetch", "--no-tags", direct,
                                "+refs/heads/main:refs/heads/main"], cwd=cache, check=True, capture_output=True)
            time.sleep(0.5)
            cpu = children_cpu(reaper) - before
            print(f"server CPU per fetch: {cpu * 1000 / a.fetches:.1f} ms")
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
