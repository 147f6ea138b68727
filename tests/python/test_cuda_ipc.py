"""CUDA tensors sent between processes with torch.multiprocessing, through
unipool's CUDA allocator (shareIpcHandle / getIpcDevPtr), on the null GPU
with shareable device memory (UNIPOOL_NULLGPU=ipc=on)."""
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

def consumer(q, back):
    x = q.get()
    back.put(bool(torch.equal(x.cpu(), torch.arange(1024, dtype=torch.float32))))
    x[:512].copy_(torch.ones(512).cuda())  # a copy: the null GPU moves the bytes
    torch.cuda.synchronize()
    back.put("written")
    q.get()
    del x

if __name__ == "__main__" and sys.argv[1:] == ["share"]:
    # What torch.multiprocessing does to a CUDA tensor it sends, in this thread.
    from torch.multiprocessing.reductions import reduce_tensor
    try:
        reduce_tensor(torch.ones(16).cuda())
        print("shared")
    except RuntimeError as e:
        print("refused:", e)
elif __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, back = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=consumer, args=(q, back))
    p.start()
    x = torch.arange(1024, dtype=torch.float32).cuda()
    q.put(x)
    print("read", back.get(timeout=120))
    assert back.get(timeout=120) == "written"
    y = x.cpu()
    print("written", bool((y[:512] == 1).all()) and torch.equal(y[512:], torch.arange(512, 1024, dtype=torch.float32)))
    q.put("done")
    p.join(timeout=120)
    print("exit", p.exitcode)
"""


def run(tmp_path, device_conf: str, *args: str) -> subprocess.CompletedProcess:
    # spawn imports the main module again in the child: it must be a file.
    script = tmp_path / "ipc_main.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, UNIPOOL_NULLGPU="ipc=on", UNIPOOL_DEVICE_CONF=device_conf)
    env.pop("UNIPOOL_INSTALL", None)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)


@needs_gpu
def test_a_cuda_tensor_crosses_processes_both_ways(tmp_path):
    r = run(tmp_path, "backend=cuda_malloc")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["read True", "written True", "exit 0"], r.stdout + r.stderr


@needs_gpu
@pytest.mark.parametrize("conf", ["backend=cuda_vmm", "backend=cuda_vmm,expandable_segments=false"])
def test_vmm_segments_are_refused_with_a_clear_error(tmp_path, conf):
    r = run(tmp_path, conf, "share")
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "use backend=cuda_malloc" in r.stdout, r.stdout
