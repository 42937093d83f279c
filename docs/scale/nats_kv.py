#!/usr/bin/env python3
"""A notification layer instead of polling (docs/scale.md, option c): NATS JetStream key-value
watch. Starts `nats-server -js` on 127.0.0.1, opens one connection per simulated host, each
watching the key of its mirror's ref (`refs.site.main`), then puts new commit ids the way a
git server's post-receive hook would, and measures put -> delivered to every watcher, and the
messages and bytes the server sent (its /varz monitoring counters). With --pushes N, also
pushes N commits to a bare repository whose post-receive hook does the put (this script with
--put), and measures `git push` started -> delivered to every watcher.

Usage: python3 -m venv /tmp/nats-venv && /tmp/nats-venv/bin/pip install nats-py
       /tmp/nats-venv/bin/python docs/scale/nats_kv.py [--hosts 500] [--puts 20]
Needs nats-server (Debian: apt-get install -y nats-server).
"""

import argparse
import asyncio
import json
import os
import sys
import shutil
import subprocess
import tempfile
import time
import urllib.request

import nats

from lib import commit, free_port, git


def varz(mport):
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/varz") as r:
        return json.load(r)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


async def run(a):
    port, mport = free_port(), free_port()
    store = tempfile.mkdtemp(prefix="treesync-scale-nats-")
    server = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-m", str(mport),
                               "-sd", store], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                varz(mport)
                break
            except OSError:
                await asyncio.sleep(0.1)
        url = f"nats://127.0.0.1:{port}"
        pub = await nats.connect(url)
        js = pub.jetstream()
        kv = await js.create_key_value(bucket="treesync", history=1)
        await kv.put("refs.site.main", b"0" * 40)

        got = {}  # value -> delivery times
        expected = a.hosts
        done = asyncio.Event()
        waiting = [None]  # the value whose deliveries are awaited
        conns = []

        async def watch_one():
            nc = await nats.connect(url)
            conns.append(nc)
            w = await (nc.jetstream()).key_value("treesync")
            watcher = await w.watch("refs.site.main")

            async def loop():
                async for e in watcher:
                    if e is None or e.value is None:
                        continue
                    got.setdefault(e.value, []).append(time.perf_counter())
                    if e.value == waiting[0] and len(got[e.value]) == expected:
                        done.set()

            asyncio.create_task(loop())

        for i in range(0, a.hosts, 50):
            await asyncio.gather(*(watch_one() for _ in range(min(50, a.hosts - i))))
        await asyncio.sleep(2)  # every watcher has had its initial value

        v0 = varz(mport)
        lat_all, lat_first = [], []
        for n in range(1, a.puts + 1):
            value = f"{n:08}".encode() + b"f" * 32
            done.clear()
            waiting[0] = value
            t0 = time.perf_counter()
            await kv.put("refs.site.main", value)
            await asyncio.wait_for(done.wait(), 60)
            lat_all.append((max(got[value]) - t0) * 1000)
            lat_first.append((min(got[value]) - t0) * 1000)
            await asyncio.sleep(0.2)
        v1 = varz(mport)
        await asyncio.sleep(a.idle)
        v2 = varz(mport)

        msgs = (v1["out_msgs"] - v0["out_msgs"]) / a.puts
        out_bytes = (v1["out_bytes"] - v0["out_bytes"]) / a.puts
        print(f"nats-server {v0['version']}, {a.hosts} watchers (one connection each), {a.puts} puts")
        print("| measure | value |")
        print("|---|---:|")
        print(f"| messages sent per put | {msgs:.0f} |")
        print(f"| payload bytes sent per put (all watchers) | {out_bytes:.0f} |")
        print(f"| put -> first watcher, p50 / p99 ms | {pct(lat_first, 50):.1f} / {pct(lat_first, 99):.1f} |")
        print(f"| put -> last of {a.hosts} watchers, p50 / p99 ms | {pct(lat_all, 50):.1f} / {pct(lat_all, 99):.1f} |")
        print(f"| messages sent while idle, {a.idle} s | {v2['out_msgs'] - v1['out_msgs']} |")
        print(f"| server RSS MiB with {a.hosts} connections | {v2['mem'] / 2**20:.0f} |")
        print(f"| server CPU % (varz, averaged by the server) | {v2['cpu']} |")
        if a.pushes:
            push_all = await pushes(a, url, got, waiting, done)
            print(f"| git push started -> post-receive put -> last of {a.hosts} watchers, p50 / p99 ms "
                  f"({a.pushes} pushes) | {pct(push_all, 50):.1f} / {pct(push_all, 99):.1f} |")
        for nc in conns:
            await nc.close()
        await pub.close()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(store, ignore_errors=True)


async def pushes(a, url, got, waiting, done):
    """git push to a bare repository whose post-receive hook puts the new id into the KV."""
    root = tempfile.mkdtemp(prefix="treesync-scale-push-")
    bare, work = os.path.join(root, "site.git"), os.path.join(root, "work")
    git("init", "-q", "--bare", "-b", "main", bare)
    git("init", "-q", "-b", "main", work)
    hook = os.path.join(bare, "hooks", "post-receive")
    with open(hook, "w") as f:
        f.write(f"""#!/bin/sh
while read old new ref; do
    [ "$ref" = refs/heads/main ] && "{sys.executable}" "{os.path.realpath(__file__)}" \\
        --put {url} refs.site.main "$new"
done
""")
    os.chmod(hook, 0o755)
    times = []
    try:
        for n in range(a.pushes):
            with open(os.path.join(work, "f.txt"), "w") as f:
                f.write(f"{n}\n")
            git("add", "-A", cwd=work)
            commit(work, "-m", str(n))
            new = git("rev-parse", "HEAD", cwd=work).strip()
            done.clear()
            waiting[0] = new
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec("git", "push", "-q", bare, "main", cwd=work)
            await asyncio.wait_for(done.wait(), 60)
            times.append((max(got[new]) - t0) * 1000)
            await proc.wait()
            await asyncio.sleep(0.2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return times


async def put(url, key, value):
    nc = await nats.connect(url)
    kv = await nc.jetstream().key_value("treesync")
    await kv.put(key, value.encode())
    await nc.close()


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--put":  # what the post-receive hook runs
        asyncio.run(put(*sys.argv[2:]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--puts", type=int, default=20)
    ap.add_argument("--idle", type=int, default=10, help="seconds to count idle traffic")
    ap.add_argument("--pushes", type=int, default=10, help="git pushes through a post-receive hook")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
