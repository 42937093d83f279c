#!/usr/bin/env python3
"""A notification layer instead of polling (docs/scale.md, option c): NATS JetStream key-value
watch. Starts `nats-server -js` on 127.0.0.1, opens one connection per simulated host, each
watching the key of its mirror's ref (`refs.site.main`), then puts new commit ids the way a
git server's post-receive hook would, and measures put -> delivered to every watcher, and the
messages and bytes the server sent (its /varz monitoring counters).

Usage: python3 -m venv /tmp/nats-venv && /tmp/nats-venv/bin/pip install nats-py
       /tmp/nats-venv/bin/python docs/scale/nats_kv.py [--hosts 500] [--puts 20]
Needs nats-server (Debian: apt-get install -y nats-server).
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import nats


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


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

        got = {}  # put number -> list of delivery times
        expected = a.hosts
        done = asyncio.Event()
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
                    n = int(e.value.decode()[:8])
                    if n == 0:
                        continue
                    got.setdefault(n, []).append(time.perf_counter())
                    if len(got[n]) == expected:
                        done.set()

            asyncio.create_task(loop())

        for i in range(0, a.hosts, 50):
            await asyncio.gather(*(watch_one() for _ in range(min(50, a.hosts - i))))
        await asyncio.sleep(2)  # every watcher has had its initial value

        v0 = varz(mport)
        lat_all, lat_first = [], []
        for n in range(1, a.puts + 1):
            done.clear()
            t0 = time.perf_counter()
            await kv.put("refs.site.main", f"{n:08}".encode() + b"f" * 32)
            await asyncio.wait_for(done.wait(), 60)
            lat_all.append((max(got[n]) - t0) * 1000)
            lat_first.append((min(got[n]) - t0) * 1000)
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
        for nc in conns:
            await nc.close()
        await pub.close()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(store, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--puts", type=int, default=20)
    ap.add_argument("--idle", type=int, default=10, help="seconds to count idle traffic")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
