"""CUDA tensors sent between processes with torch.multiprocessing, through
unipool's CUDA allocator (shareIpcHandle / getIpcDevPtr), on the null GPU
with shareable device memory (UNIPOOL_NULLGPU=ipc=on): cudaMalloc segments
(cudaIpc), and CUDA VMM memory, expandable segments or not (descriptors of
the granules, lent over a Unix socket)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import needs_gpu

SCRIPT = """
import sys
import torch
import torch.multiprocessing as mp
import unipool.torch
unipool.torch.install()

BIG = 3 << 19  # floats: 6 MiB, over more than one 2 MiB granule

def consumer(q, back):
    x, big = q.get()
    back.put(bool(torch.equal(x.cpu(), torch.arange(1024, dtype=torch.float32)))
             and bool(torch.equal(big.cpu(), torch.arange(BIG, dtype=torch.float32))))
    x[:512].copy_(torch.ones(512).cuda())  # a copy: the null GPU moves the bytes
    torch.cuda.synchronize()
    back.put("written")
    q.get()
    del x

if __name__ == "__main__" and sys.argv[1:] == ["share"]:
    # What torch.multiprocessing does to a CUDA tensor it sends, in this thread.
    from torch.multiprocessing.reductions import reduce_tensor
    try:
        _, args = reduce_tensor(torch.ones(16).cuda())
        handle = args[7]  # storage_handle: b"unipool-ipc/2:" + device + the backend's kind, ...
        print("shared", chr(handle[len(b"unipool-ipc/2:") + 1]))
    except RuntimeError as e:
        print("refused:", e)
elif __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, back = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(q, back))
    p.start()
    x = torch.arange(1024, dtype=torch.float32).cuda()
    big = torch.arange(BIG, dtype=torch.float32).cuda()
    q.put((x, big))
    print("read", back.get(timeout=120))
    assert back.get(timeout=120) == "written"
    y = x.cpu()
    print("written", bool((y[:512] == 1).all()) and torch.equal(y[512:], torch.arange(512, 1024, dtype=torch.float32)))
    q.put("done")
    p.join(timeout=120)
    print("exit", p.exitcode)
"""


def run(tmp_path, device_conf: str, *args: str, nullgpu: str = "ipc=on") -> subprocess.CompletedProcess:
    # spawn imports the main module again in the child: it must be a file.
    script = tmp_path / "ipc_main.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, UNIPOOL_NULLGPU=nullgpu, UNIPOOL_DEVICE_CONF=device_conf)
    env.pop("UNIPOOL_INSTALL", None)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)


BACKENDS = ["backend=cuda_malloc", "backend=cuda_vmm", "backend=cuda_vmm,expandable_segments=false"]


@needs_gpu
@pytest.mark.parametrize("conf", BACKENDS)
def test_cuda_tensors_cross_processes_both_ways(tmp_path, conf):
    r = run(tmp_path, conf)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["read True", "written True", "exit 0"], r.stdout + r.stderr


@needs_gpu
@pytest.mark.parametrize("conf, kind", list(zip(BACKENDS, "CVV")))
def test_each_backend_shares_its_own_way(tmp_path, conf, kind):
    r = run(tmp_path, conf, "share")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"shared {kind}", r.stdout  # C: cudaIpc, V: VMM granules


@needs_gpu
@pytest.mark.parametrize("conf", BACKENDS[1:])
def test_vmm_memory_a_device_cannot_export_is_refused_clearly(tmp_path, conf):
    r = run(tmp_path, conf, "share", nullgpu="")  # no POSIX descriptor handles
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "POSIX file descriptor" in r.stdout, r.stdout
