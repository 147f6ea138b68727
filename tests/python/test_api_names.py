"""docs/api.md's tables and the code agree, both ways.

- C: every `unipool_*` function the tables name is exported by libunipool,
  and every function libunipool exports is named.
- Python: every `unipool.*` / `torch.*` name resolves, and every public name
  of `unipool`, `unipool.torch`, `unipool.KVBlockPool` and `unipool.nixl`
  (the module and its classes) is named.
- C++: every `Class::member` is declared in the class, and every public
  member function of the documented classes is named.
"""
from __future__ import annotations

import importlib
import pathlib
import re
import subprocess

import pytest
import torch

import unipool
import unipool.torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
HEADERS = ROOT / "include" / "unipool"
# The classes whose public members the tables must cover, and their headers.
CLASSES = {
    "RangeAllocator": "range_allocator.hpp",
    "HostPool": "host_pool.hpp",
    "DevicePool": "device_pool.hpp",
    "DevicePools": "device_pool.hpp",
    "KVPool": "kv_pool.hpp",
    "KVBlockPool": "kv_block_pool.hpp",
    "SharedKVBlockPool": "shared_kv_block_pool.hpp",
    "RegistrationCache": "registration_cache.hpp",
}


def table_names() -> dict[str, set[str]]:
    """Backticked names per column (C++, C, Python) of the 5-column tables."""
    cols = {"cpp": set(), "c": set(), "python": set()}
    for line in API_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("concept", "---"):
            continue
        for key, cell in zip(("cpp", "c", "python"), cells[1:4]):
            # `Name` (`Type`): only the first backticked name of a group is a
            # member; a parenthesised one names its type or argument.
            for m in re.finditer(r"`([^`]+)`", cell):
                if cell[m.start() - 1:m.start()] != "(":
                    cols[key].add(m.group(1))
    return cols


NAMES = table_names()


def test_the_tables_are_found():
    assert len(NAMES["c"]) > 30 and len(NAMES["python"]) > 30 and len(NAMES["cpp"]) > 60


def exported_c_functions() -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", unipool.library_path()], check=True,
                         capture_output=True, text=True).stdout
    return {parts[2] for parts in (l.split() for l in out.splitlines())
            if len(parts) == 3 and parts[1] == "T" and parts[2].startswith("unipool_")}


def test_c_names_match_the_exports():
    documented = {n for n in NAMES["c"] if n.startswith("unipool_") and not n.endswith("_t")}
    exported = exported_c_functions()
    assert documented - exported == set(), "named in docs/api.md but not exported"
    assert exported - documented == set(), "exported but not in docs/api.md"


def kv_instance():
    return unipool.KVBlockPool(block_bytes=256, num_blocks=4, pinned=False)


def resolve(name: str, kv):
    parts = name.split(".")
    obj = {"unipool": unipool, "torch": torch}[parts[0]]
    for i, part in enumerate(parts[1:], start=1):
        if obj is unipool.KVBlockPool and i == 2:
            obj = kv  # instance attributes (blocks, block_shape, dtype) too
        obj = getattr(obj, part)
    return obj


def test_python_names_resolve():
    kv = kv_instance()
    missing = []
    for name in sorted(NAMES["python"]):
        if not name.startswith(("unipool.", "torch.")):
            continue
        try:
            resolve(name, kv)
        except AttributeError:
            missing.append(name)
    assert missing == [], "named in docs/api.md but not found"


# unipool.nixl's classes whose public members the tables must cover.
NIXL_CLASSES = ("RegionCache", "HostAgent", "DeviceAgent", "KVAgent", "KVPeer", "Transfer")


def public_python_names() -> set[str]:
    names = {f"unipool.{n}" for n in unipool.__all__}
    names |= {f"unipool.torch.{n}" for n in dir(unipool.torch)
              if not n.startswith("_") and callable(getattr(unipool.torch, n))
              and getattr(getattr(unipool.torch, n), "__module__", "") == "unipool.torch"}
    kv = kv_instance()
    names |= {f"unipool.KVBlockPool.{n}" for n in dir(kv) if not n.startswith("_")}
    # SharedKVBlockPool's own names; what it inherits is KVBlockPool's.
    names |= {f"unipool.SharedKVBlockPool.{n}" for n in vars(unipool.SharedKVBlockPool) if not n.startswith("_")}
    nixl = importlib.import_module("unipool.nixl")  # NIXL is a test requirement: its absence fails here
    names |= {f"unipool.nixl.{n}" for n in nixl.__all__}
    for cls in NIXL_CLASSES:
        names |= {f"unipool.nixl.{cls}.{n}" for n in dir(getattr(nixl, cls)) if not n.startswith("_")}
    return names


def test_every_public_python_name_is_documented():
    documented = {n for n in NAMES["python"] if n.startswith("unipool.")}
    undocumented = public_python_names() - documented
    # The exception types are documented in the Errors section, by name.
    undocumented -= {"unipool.KVPoolExhaustedError", "unipool.KVDoubleFreeError"}
    assert undocumented == set(), "public in Python but not in docs/api.md"


# A class whose members override a documented base's are documented there.
BASES = {"KVBlockPool": "KVPool", "SharedKVBlockPool": "KVPool"}


def class_body(cls: str) -> str:
    text = (HEADERS / CLASSES[cls]).read_text()
    m = re.search(rf"^class {cls}\b[^{{;]*\{{(.*?)^\}};", text, re.S | re.M)
    assert m, f"class {cls} not found"
    return m.group(1)


def public_members(cls: str) -> set[str]:
    public, members = False, set()
    for line in class_body(cls).splitlines():
        s = line.strip()
        if s in ("public:", "private:", "protected:"):
            public = s == "public:"
            continue
        if not public or s.startswith("//") or "operator" in s or "delete;" in s:
            continue
        m = re.match(r"(?:static |explicit |virtual |\[\[nodiscard\]\] )*(?:[\w:<>,*& ]+[\s*&])?(~?\w+)\(", s)
        if m:
            members.add(m.group(1))
    return members


def test_cpp_names_are_declared():
    missing = []
    for name in sorted(NAMES["cpp"]):
        cls, _, member = name.partition("::")
        if cls not in CLASSES or not member:
            continue
        if member in (cls, f"~{cls}"):
            continue  # constructors and destructors (a destructor may be implicit)
        if not re.search(rf"\b{member}\(", class_body(cls)):
            missing.append(name)
    assert missing == [], "named in docs/api.md but not declared"


@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_every_public_cpp_member_is_documented(cls):
    documented = {n.partition("::")[2] for n in NAMES["cpp"] if n.startswith((cls + "::", BASES.get(cls, cls) + "::"))}
    undocumented = public_members(cls) - documented - {cls, f"~{cls}"}
    assert undocumented == set(), f"public in {cls} but not in docs/api.md"


def test_test_hooks_live_only_in_unipool_testing():
    out = subprocess.run(
        ["python3", "-c", "import sys, unipool, unipool.torch; print('unipool._testing' in sys.modules);"
                          "print(' '.join(dir(unipool._C)))"],
        check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0] == "False", "import unipool must not import the test hooks"
    production = set(out[1].split())
    import unipool._testing as hooks
    hook_names = {n for n in dir(hooks) if not n.startswith("_")}
    assert {"noop", "host_owns", "cuda_raw_alloc", "sim_complete_all"} <= hook_names
    left = {n for n in hook_names if n in production or "_" + n in production}
    assert left == set(), "test hooks left in the production module"
    assert hooks.EmptyMethods().noop() is None
    assert not any(n.startswith("_noop") for n in dir(unipool.KVBlockPool)), "a test hook on a production type"
