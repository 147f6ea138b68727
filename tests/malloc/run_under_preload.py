#!/usr/bin/env python3
"""Runs a program with and without LD_PRELOAD=libunipool_malloc.so (ctest).

  run_under_preload.py compare --lib L [--input-lines N] -- CMD...
      Runs CMD without, then with the face preloaded; both must exit 0 and
      print the same stdout. With --input-lines, a file of N pseudo-random
      lines is made first and its path appended to CMD.
  run_under_preload.py abort --lib L --expect TEXT -- CMD...
      Runs CMD with the face preloaded; it must die of SIGABRT and print TEXT
      (and the face's "unipool malloc: " prefix) on stderr. "{victim}" in
      TEXT stands for the address CMD printed as "victim=ADDRESS" on stderr.
  run_under_preload.py warn --lib L --expect TEXT -- CMD...
      Runs CMD with the face preloaded; it must exit 0 and print TEXT (and
      the face's prefix) on stderr: a refusal the face reports and survives.
  run_under_preload.py maps --lib L [--present NAME] [--absent NAME]
                          [--max-file-mappings N]
      The face really is mapped into a preloaded process (and NAME is, or
      is not, mapped beside it; the face's file takes at most N mappings).
  --env KEY=VALUE (any mode, repeatable) sets a variable for the program,
  e.g. UNIPOOL_HOST_CONF=thread_cache=none.
  --rlimit-as BYTES (any mode) runs the program (both runs) under that
  address-space limit (RLIMIT_AS, as prlimit --as; K/M/G suffixes).
"""
import argparse
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile

PRELOAD_FAILED = "cannot be preloaded"


EXTRA_ENV = {}
RLIMIT_AS = None  # bytes, for the program only (not this script)


def limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (RLIMIT_AS, RLIMIT_AS))


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def run(cmd, lib=None, timeout=240):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(EXTRA_ENV)
    if lib:
        env["LD_PRELOAD"] = lib
    env.setdefault("LC_ALL", "C")
    preexec = limit_address_space if RLIMIT_AS is not None else None
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


def fail(msg, proc=None):
    print(f"FAIL: {msg}")
    if proc is not None:
        print(f"--- exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-2000:]}\n--- stderr (tail)\n{proc.stderr[-2000:]}")
    return 1


def make_input(lines):
    rng = random.Random(12345)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(1, 12)))
             for _ in range(5000)]
    fd, path = tempfile.mkstemp(prefix="unipool_malloc_sort_", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        for i in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randrange(1, 16))))
            f.write(f" {rng.randrange(10**9)}\n")
    return path


def compare(args):
    cmd = list(args.cmd)
    path = make_input(args.input_lines) if args.input_lines else None
    if path:
        cmd.append(path)
    try:
        plain = run(cmd)
        if plain.returncode != 0:
            return fail("the program fails without the face", plain)
        face = run(cmd, args.lib)
        if PRELOAD_FAILED in face.stderr:
            return fail("the face was not preloaded", face)
        if face.returncode != 0:
            return fail("the program fails under the face", face)
        if face.stdout != plain.stdout:
            return fail(f"different output: {len(plain.stdout)} bytes without, {len(face.stdout)} with\n"
                        f"without (head): {plain.stdout[:300]!r}\nwith (head): {face.stdout[:300]!r}")
    finally:
        if path:
            os.unlink(path)
    print(f"same output with and without the face ({len(plain.stdout)} bytes): {' '.join(args.cmd)}")
    return 0


def says_why(args, returncode: int, expected: str, outcome: str):
    """The face ends with `returncode` and its stderr names itself and the
    expected text."""
    face = run(args.cmd, args.lib)
    if face.returncode != returncode:
        return fail(f"expected {expected}", face)
    victim = re.search(r"^victim=(0x[0-9a-f]+)$", face.stderr, re.M)
    expect = args.expect.replace("{victim}", victim.group(1) if victim else "(no victim= line)")
    for text in ("unipool malloc: ", expect):
        if text not in face.stderr:
            return fail(f"stderr lacks {text!r}", face)
    print(f"{outcome} as expected: {face.stderr.strip()}")
    return 0


def abort(args):
    return says_why(args, -signal.SIGABRT, "SIGABRT", "aborted")


def warn(args):
    return says_why(args, 0, "exit 0", "warned")


def maps(args):
    face = run(["cat", "/proc/self/maps"], args.lib)
    name = os.path.basename(args.lib)
    # The file as the loader opened it: --lib may be a symlink to it.
    real = os.path.basename(os.path.realpath(args.lib))
    own = [line for line in face.stdout.splitlines() if line.endswith("/" + real)]
    if face.returncode != 0 or not own:
        return fail(f"{name} (the file {real}) not mapped in a preloaded process", face)
    for library in args.present:
        if library not in face.stdout:
            return fail(f"{library} not mapped in a preloaded process", face)
    for library in args.absent:
        if library in face.stdout:
            return fail(f"{library} mapped in a preloaded process", face)
    if args.max_file_mappings is not None and len(own) > args.max_file_mappings:
        return fail(f"{name} takes {len(own)} mappings, more than {args.max_file_mappings}:\n" + "\n".join(own))
    print(f"{name} is mapped in a preloaded process; present: {args.present}, absent: {args.absent}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["compare", "abort", "warn", "maps"])
    p.add_argument("--lib", required=True)
    p.add_argument("--expect", default="")
    p.add_argument("--input-lines", type=int, default=0)
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="set in the program's environment (both runs)")
    p.add_argument("--present", action="append", default=[], metavar="NAME",
                   help="maps: a library that must be mapped too (repeatable)")
    p.add_argument("--absent", action="append", default=[], metavar="NAME",
                   help="maps: a library that must not be mapped (repeatable)")
    p.add_argument("--max-file-mappings", type=int, default=None, metavar="N",
                   help="maps: most mappings of the face's own file")
    p.add_argument("--rlimit-as", default=None, metavar="BYTES",
                   help="the program's address-space limit (RLIMIT_AS), e.g. 8G")
    argv = sys.argv[1:]
    cmd = []
    if "--" in argv:  # everything after "--" is the program and its arguments
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1:]
    args = p.parse_args(argv)
    args.cmd = cmd
    EXTRA_ENV.update(kv.split("=", 1) for kv in args.env)
    global RLIMIT_AS
    RLIMIT_AS = parse_bytes(args.rlimit_as) if args.rlimit_as else None
    return {"compare": compare, "abort": abort, "warn": warn, "maps": maps}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
