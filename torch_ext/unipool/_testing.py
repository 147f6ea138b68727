"""Test hooks of the unipool extension: calls into torch's allocators as
torch itself makes them, the sim backend's fences, an empty call for
benchmarks. For unipool's tests and benchmarks; `import unipool` does not
import this module, and nothing here is a stable API.
"""
import sys as _sys

from . import _C

_C._bind_testing_hooks(_sys.modules[__name__])
