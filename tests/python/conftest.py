"""unipool pytest helpers. install() is process-wide and must come before
CUDA initialises, so every test that installs runs its own interpreter."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

SIM = "backend=sim,sim_capacity=1GiB"
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs CUDA: run on a GPU or on the null GPU "
                                                    "(scripts/nullgpu.sh python3 -m pytest tests/python)")


# Bad-input cases (tests/python/test_bad_input.py, test_nixl.py): each test
# that feeds a public name bad input says so with @covers, and
# test_bad_input.test_every_public_name_has_a_case fails for a public name
# without one. One registry for every file, here.
COVERED: set[str] = set()


def covers(*names):
    """Marks a test as the bad-input case of these public names."""
    COVERED.update(names)
    return lambda f: f


def pytest_sessionstart(session):
    # scripts/test.sh runs the suite on the null GPU: a missing CUDA there is
    # a broken set-up, not a reason to skip half the tests.
    if os.environ.get("UNIPOOL_REQUIRE_CUDA") == "1" and not HAS_GPU:
        pytest.exit("UNIPOOL_REQUIRE_CUDA=1 but torch sees no CUDA device (is the null GPU preloaded?)", 3)


def run_py(code: str, env: dict | None = None) -> str:
    """Runs `code` in a fresh interpreter; returns its stdout, fails the test
    with its stderr when it exits non-zero."""
    full_env = dict(os.environ)
    full_env.pop("UNIPOOL_INSTALL", None)
    full_env.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=full_env, timeout=120)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout
