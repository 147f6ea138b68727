"""Runs a program on the null GPU: unipool's stand-ins for the CUDA runtime
(libcudart.so.13), the driver (libcuda.so.1) and cuBLAS/cuBLASLt, under
which torch's own CUDA code runs on the CPU. Copies move real bytes, kernels
and GEMMs succeed and compute nothing, events complete after a lag.

    python -m unipool.testing.nullgpu CMD [ARGS...]

The stand-ins are built with the project (target unipool_nullgpu_libraries
of the release preset, in build/release/nullgpu/). They are found through
UNIPOOL_NULLGPU_LIB_DIR, else in build/release/nullgpu below the current
directory or one of its parents. UNIPOOL_NULLGPU configures the device
(tests/nullgpu/README.md): for example "devices=2,capacity=24GiB,event_lag=4".

No figure measured this way is a GPU time: the null GPU measures the host
side of CUDA code (allocator calls, copies), never kernels.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

RUNTIME = "libcudart.so.13"
PRELOADED = (RUNTIME, "libcublas.so.13", "libcublasLt.so.13")


def library_dir() -> Path:
    """The folder holding the stand-ins; FileNotFoundError saying how to
    build them when there is none."""
    given = os.environ.get("UNIPOOL_NULLGPU_LIB_DIR")
    candidates = [Path(given)] if given else [p / "build" / "release" / "nullgpu"
                                             for p in (Path.cwd(), *Path.cwd().parents)]
    for folder in candidates:
        if (folder / RUNTIME).is_file():
            return folder.resolve()
    raise FileNotFoundError(
        f"no null GPU ({RUNTIME}) in {', '.join(map(str, candidates[:2]))}...: build it from the "
        "repository with `cmake --preset release && cmake --build --preset release --target "
        "unipool_nullgpu_libraries`, or set UNIPOOL_NULLGPU_LIB_DIR")


def environment(base: dict[str, str] | None = None, config: str | None = None) -> dict[str, str]:
    """`base` (default: os.environ) with the null GPU preloaded; `config`,
    if given, becomes UNIPOOL_NULLGPU."""
    env = dict(os.environ if base is None else base)
    folder = library_dir()
    preload = [str(folder / name) for name in PRELOADED if (folder / name).is_file()]
    env["LD_PRELOAD"] = " ".join(preload + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(folder), env.get("LD_LIBRARY_PATH")]))
    env["UNIPOOL_NULLGPU_LIB_DIR"] = str(folder)
    if config is not None:
        env["UNIPOOL_NULLGPU"] = config
    return env


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        env = environment()
    except FileNotFoundError as e:
        print(f"unipool.testing.nullgpu: {e}", file=sys.stderr)
        return 2
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
