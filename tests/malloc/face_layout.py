#!/usr/bin/env python3
"""The malloc face loads cheaply: its data's layout, and no demangler.

  face_layout.py LIB

The loader writes the page where the face's .data ends (relocations). The
face's other zero-initialised data (the first allocation's counters, the C++
runtime's exception pool) must start on that page, in .bss, and the 256 KiB
bootstrap buffer (page-aligned) must come after it, not inside it: there it
pushed that data onto pages of its own, which a preloaded /bin/true then
faulted in (csrc/malloc/bootstrap_arena.cpp). And the face's hidden copy of
libstdc++ carries no demangler (csrc/malloc/cxx_runtime.cpp): its code and
relocations would cost every preloaded process. Read with binutils'
readelf; the layout on x86-64 ELF only (elsewhere the buffer stays in .bss).
"""
import platform
import re
import subprocess
import sys

PAGE = 4096
BUFFER = "_ZN7unipool11malloc_face18g_bootstrap_bufferE"


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def sections(lib):
    """name -> (address, size) of every allocated section."""
    out = {}
    for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", readelf("-S", lib)):
        out[m.group(1)] = (int(m.group(2), 16), int(m.group(3), 16))
    return out


def symbol(lib, name):
    """(address, size) of a symbol of the static symbol table."""
    for line in readelf("-s", lib).splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[7] == name:
            return int(fields[1], 16), int(fields[2], 0)
    return None


def main():
    lib = sys.argv[1]
    demanglers = sorted({line.split()[7] for line in readelf("-s", lib).splitlines()
                         if len(line.split()) >= 8 and "demangle" in line.split()[7]})
    if demanglers:
        print("FAIL: the face links a demangler:", ", ".join(demanglers[:5]))
        return 1
    if platform.machine() != "x86_64":
        print(f"not x86-64 ({platform.machine()}): the buffer stays in .bss there; nothing to check")
        return 0
    sec = sections(lib)
    found = symbol(lib, BUFFER)
    if found is None or ".bss" not in sec or ".data" not in sec:
        print(f"FAIL: {lib} has no .data/.bss or no {BUFFER} symbol (stripped?)")
        return 1
    buffer, size = found
    bss, bss_size = sec[".bss"]
    data, data_size = sec[".data"]
    problems = []
    if buffer < bss + bss_size:
        problems.append(f"the bootstrap buffer ({buffer:#x}) comes before the end of .bss ({bss + bss_size:#x})")
    if bss // PAGE != (data + data_size - 1) // PAGE:
        problems.append(f".bss starts at {bss:#x}, not on the page where .data ends ({data + data_size - 1:#x})")
    if size % PAGE or buffer % PAGE:
        problems.append(f"the bootstrap buffer ({buffer:#x}, {size} bytes) is not whole pages")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f".data ends at {data + data_size:#x}, .bss {bss:#x}+{bss_size:#x}, bootstrap buffer {buffer:#x}+{size:#x}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
