#!/usr/bin/env python3
"""Real programs under LD_PRELOAD, one allocator after the other in the same run.

  python3 bench/host/programs.py [--quick] [--json FILE] [--face PATH]

Two programs, each run under glibc (no preload), unipool's malloc face,
mimalloc, jemalloc and tcmalloc, the allocators taking turns round by round
so that a change in the machine's load falls on all of them:

  start-up   /bin/true, launched ROUNDS times per allocator (posix_spawn,
             wall time to exit); peak RSS of one run under /usr/bin/time.
             What a preloaded allocator adds to every short process.
  speedtest1 SQLite's own benchmark (test/speedtest1.c of the SQLite that
             Debian 12 ships, 3.40.1) on an in-memory database (--memdb),
             linked against the system libsqlite3; wall, CPU (user + sys)
             and peak RSS under /usr/bin/time. Its source is downloaded once
             from Debian's archive into --work.

Prints one table per program with ratios to glibc and writes them as JSON.
Timings are of this machine's CPU; nothing here touches a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQLITE_VERSION = "3.40.1"
SQLITE_URL = f"https://deb.debian.org/debian/pool/main/s/sqlite3/sqlite3_{SQLITE_VERSION}.orig.tar.xz"
PEERS = {  # allocator -> sonames tried in order (as bench/host/peers.cpp does)
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so"],
    "jemalloc": ["libjemalloc.so.2", "libjemalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"],
}


def library_path(sonames: list[str]) -> str | None:
    """The file the dynamic loader would open for the first soname it knows."""
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for soname in sonames:
        for line in listing.splitlines():
            parts = line.strip().split(" => ")
            if len(parts) == 2 and parts[0].split(" ")[0] == soname:
                return parts[1]
    return None


def allocators(face: str) -> dict[str, str | None]:
    """name -> LD_PRELOAD value (None: glibc, no preload). Missing peers are left out."""
    found: dict[str, str | None] = {"glibc": None}
    if not os.path.exists(face):
        sys.exit(f"programs.py: {face} not found: build the release preset first")
    found["unipool"] = face
    for name, sonames in PEERS.items():
        path = library_path(sonames)
        if path is None:
            print(f"programs.py: {name} not installed, left out", file=sys.stderr)
        else:
            found[name] = path
    return found


def environment(preload: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    return env


def timed(cmd: list[str], preload: str | None) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (KiB) of one run, from /usr/bin/time
    (a small launcher: its own RSS does not hide the program's)."""
    fmt = "%e %U %S %M"
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, *cmd], env=environment(preload),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"programs.py: {' '.join(cmd)} failed under {preload or 'glibc'}:\n{proc.stderr}")
    wall, user, system, rss = proc.stderr.strip().splitlines()[-1].split()
    return {"wall_s": float(wall), "cpu_s": float(user) + float(system), "rss_kib": float(rss)}


def spawn_seconds(path: str, preload: str | None) -> float:
    env = environment(preload)
    start = time.perf_counter()
    pid = os.posix_spawn(path, [path], env)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"programs.py: {path} failed under {preload or 'glibc'} (status {status})")
    return elapsed


def startup(allocs: dict[str, str | None], rounds: int) -> dict[str, dict[str, float]]:
    names = list(allocs)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
            times[n].append(spawn_seconds("/bin/true", allocs[n]))
    out = {}
    for n in names:
        rss = statistics.median(timed(["/bin/true"], allocs[n])["rss_kib"] for _ in range(3))
        out[n] = {"median_ms": 1e3 * statistics.median(times[n]), "rss_kib": rss, "runs": rounds}
    return out


def build_speedtest1(work: str) -> str | None:
    """speedtest1 compiled against the system libsqlite3; None (and why) if it cannot be."""
    exe = os.path.join(work, "speedtest1")
    if os.path.exists(exe):
        return exe
    os.makedirs(work, exist_ok=True)
    tarball = os.path.join(work, os.path.basename(SQLITE_URL))
    try:
        if not os.path.exists(tarball):
            with urllib.request.urlopen(SQLITE_URL, timeout=60) as response, open(tarball + ".part", "wb") as f:
                f.write(response.read())
            os.rename(tarball + ".part", tarball)
        member = f"sqlite3-{SQLITE_VERSION}/test/speedtest1.c"
        with tarfile.open(tarball) as tar:
            source = tar.extractfile(member).read()
    except (OSError, KeyError, tarfile.TarError) as e:
        print(f"programs.py: speedtest1 left out: cannot get {SQLITE_URL}: {e}", file=sys.stderr)
        return None
    src = os.path.join(work, "speedtest1.c")
    with open(src, "wb") as f:
        f.write(source)
    cc = subprocess.run(["cc", "-O2", "-o", exe, src, "-lsqlite3"], capture_output=True, text=True)
    if cc.returncode != 0:
        print(f"programs.py: speedtest1 left out: it does not build (libsqlite3-dev?):\n{cc.stderr}",
              file=sys.stderr)
        return None
    return exe


def speedtest(exe: str, allocs: dict[str, str | None], size: int, repeats: int) -> dict[str, dict[str, float]]:
    cmd = [exe, "--memdb", "--size", str(size)]
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in allocs}
    names = list(allocs)
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            runs[n].append(timed(cmd, allocs[n]))
    return {n: {key: statistics.median(run[key] for run in runs[n]) for key in ("wall_s", "cpu_s", "rss_kib")}
            | {"runs": repeats, "size": size} for n in names}


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([title, line(header), line(["-" * w for w in widths]), *map(line, rows)])


def report(results: dict) -> str:
    parts = []
    if "startup" in results:
        s = results["startup"]
        base = s["glibc"]
        rows = [[n, f"{v['median_ms']:.2f}", f"{v['median_ms'] / base['median_ms']:.2f}x",
                 f"{v['rss_kib'] / 1024:.1f}", f"{v['rss_kib'] / base['rss_kib']:.2f}x"] for n, v in s.items()]
        parts.append(table(f"start-up of /bin/true (median of {base['runs']} launches)",
                           ["allocator", "ms", "/glibc", "peak RSS MiB", "/glibc"], rows))
    if "speedtest1" in results:
        s = results["speedtest1"]
        base = s["glibc"]
        rows = [[n, f"{v['wall_s']:.2f}", f"{v['cpu_s']:.2f}", f"{v['cpu_s'] / base['cpu_s']:.2f}x",
                 f"{v['rss_kib'] / 1024:.1f}", f"{v['rss_kib'] / base['rss_kib']:.2f}x"] for n, v in s.items()]
        parts.append(table(f"sqlite speedtest1 --memdb --size {base['size']} (median of {base['runs']})",
                           ["allocator", "wall s", "CPU s", "/glibc", "peak RSS MiB", "/glibc"], rows))
    return "\n\n".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="few launches, a small database (CI smoke)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--face", default=os.path.join(ROOT, "build/release/csrc/malloc/libunipool_malloc.so"))
    p.add_argument("--work", default=os.path.join(ROOT, "build/release/bench/programs"),
                   help="where speedtest1 is downloaded and built")
    args = p.parse_args()
    allocs = allocators(args.face)
    results: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
                     "allocators": allocs}
    results["startup"] = startup(allocs, 30 if args.quick else 400)
    exe = build_speedtest1(args.work)
    if exe is not None:
        results["speedtest1"] = speedtest(exe, allocs, 5 if args.quick else 100, 1 if args.quick else 3)
    print(report(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
