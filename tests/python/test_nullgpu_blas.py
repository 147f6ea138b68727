"""The null GPU's cuBLAS and cuBLASLt stand-ins (tests/nullgpu/blas), under
torch: its matmuls reach them (GEMMs through cuBLAS, bias epilogues through
cuBLASLt) and succeed without computing; the vector and matrix copies move
real bytes; a destroyed handle and a function that is not implemented fail
as they should. Nothing of unipool is installed here."""
import pytest

from conftest import needs_gpu, run_py

pytestmark = needs_gpu

PRELUDE = """
import ctypes, os
import torch
import torch.nn.functional as F
lib_dir = os.environ["UNIPOOL_NULLGPU_LIB_DIR"]
lt = ctypes.CDLL(os.path.join(lib_dir, "libcublasLt.so.13"))
blas = ctypes.CDLL(os.path.join(lib_dir, "libcublas.so.13"))
lt.unipool_nullgpu_blas_compute_calls.restype = ctypes.c_uint64
calls = lt.unipool_nullgpu_blas_compute_calls
"""


def test_torch_matmuls_reach_the_stand_ins_and_compute_nothing():
    out = run_py(PRELUDE + """
before = calls()
a = torch.ones(64, 128, device="cuda", dtype=torch.bfloat16)
w = torch.ones(256, 128, device="cuda", dtype=torch.bfloat16)
b = torch.ones(256, device="cuda", dtype=torch.bfloat16)
mm = a @ w.t()                                  # cublasGemmEx
lin = F.linear(a, w, b)                         # cublasLt with a bias epilogue
bmm = torch.bmm(a.view(4, 16, 128), a.view(4, 16, 128).transpose(1, 2))  # strided batched
assert mm.shape == (64, 256) and lin.shape == (64, 256) and bmm.shape == (4, 16, 16)
print(calls() - before)
""")
    assert int(out) >= 3


def test_vector_and_matrix_copies_move_real_bytes():
    run_py(PRELUDE + """
import array
dev = torch.zeros(64, dtype=torch.float32, device="cuda")
src = (ctypes.c_float * 32)(*range(32))
# every element of src into every other element of dev
assert blas.cublasSetVector(32, 4, src, 1, ctypes.c_void_p(dev.data_ptr()), 2) == 0
host = dev.cpu()
assert host[0::2].tolist() == list(range(32)) and host[1::2].abs().sum() == 0
back = (ctypes.c_float * 32)()
assert blas.cublasGetVector(32, 4, ctypes.c_void_p(dev.data_ptr()), 2, back, 1) == 0
assert list(back) == list(range(32))
# a 3x4 column-major matrix into a device buffer with leading dimension 8
mat = (ctypes.c_float * 12)(*range(12))
dm = torch.zeros(32, dtype=torch.float32, device="cuda")
assert blas.cublasSetMatrix(3, 4, 4, mat, 3, ctypes.c_void_p(dm.data_ptr()), 8) == 0
assert dm.cpu().view(4, 8)[:, :3].flatten().tolist() == list(range(12))
# bad arguments and memory that is not the device's
assert blas.cublasSetVector(32, 4, src, 0, ctypes.c_void_p(dev.data_ptr()), 1) == 7   # INVALID_VALUE
assert blas.cublasSetMatrix(3, 4, 4, mat, 2, ctypes.c_void_p(dm.data_ptr()), 8) == 7  # lda < rows
""")


def test_handles_are_checked_and_unknown_calls_fail_loudly():
    out = run_py(PRELUDE + """
handle = ctypes.c_void_p()
assert blas.cublasCreate_v2(ctypes.byref(handle)) == 0 and handle.value
mode = ctypes.c_int(-1)
assert blas.cublasSetMathMode(handle, 1) == 0
assert blas.cublasGetMathMode(handle, ctypes.byref(mode)) == 0 and mode.value == 1
assert blas.cublasSgemm_v2(handle) == 0                     # computes nothing, succeeds
assert blas.cublasDestroy_v2(handle) == 0
assert blas.cublasDestroy_v2(handle) == 1                   # NOT_INITIALIZED: already destroyed
assert blas.cublasSgemm_v2(handle) == 1
assert blas.cublasStpmv_v2(None) == 15                      # NOT_SUPPORTED: not implemented
assert lt.cublasLtMatmulAlgoCheck(None) == 15
print("ok")
""")
    assert out.strip() == "ok"


def test_unimplemented_calls_name_themselves_on_stderr():
    import os, subprocess, sys
    code = PRELUDE + "blas.cublasStpmv_v2(None); blas.cublasStpmv_v2(None)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("unipool null GPU: cublasStpmv_v2 is not implemented") == 1
