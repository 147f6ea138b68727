#!/usr/bin/env python3
"""The malloc face loads cheaply: its data's layout, and no demangler.

  face_layout.py LIB [READELF]

The loader writes the page where the face's .data ends (relocations). The
face's other zero-initialised data (the first allocation's counters, the C++
runtime's exception pool) must start on that page, in .bss, and the 256 KiB
bootstrap buffer (page-aligned) must come after it, not inside it: there it
pushed that data onto pages of its own, which a preloaded /bin/true then
faulted in (csrc/malloc/bootstrap_arena.cpp). The buffer's section must be
zero-filled (NOBITS), not 256 KiB of the file. And the face's hidden copy of
libstdc++ carries no demangler (csrc/malloc/cxx_runtime.cpp): its code and
relocations would cost every preloaded process. Read with binutils' readelf
(READELF, default `readelf`). The layout is checked for x86-64 libraries
built by GCC (elsewhere the buffer stays in .bss), the demangler for those
that link libstdc++.
"""
import re
import subprocess
import sys

PAGE = 4096
BUFFER = "_ZN7unipool11malloc_face18g_bootstrap_bufferE"
READELF = "readelf"


def readelf(*args, check=True):
    try:
        return subprocess.run([READELF, "-W", *args], check=check, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"FAIL: cannot run {READELF} {' '.join(args)}: {e}")


def sections(lib):
    """name -> (type, address, size) of every section."""
    out = {}
    pattern = r"\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)"
    for m in re.finditer(pattern, readelf("-S", lib)):
        out[m.group(1)] = (m.group(2), int(m.group(3), 16), int(m.group(4), 16))
    return out


def symbols(lib):
    """name -> (address, size) from the static symbol table (.symtab)."""
    out = {}
    for line in readelf("-s", lib).splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0][:-1].isdigit() and fields[0].endswith(":"):
            out[fields[7]] = (int(fields[1], 16), int(fields[2], 0))
    return out


def check_layout(lib, sec, syms):
    """Problems with the data's layout (x86-64, GCC's .lbss)."""
    if ".lbss" not in sec:
        return ["no .lbss section: the bootstrap buffer is not after .bss (built by clang, or the attribute is gone?)"]
    buffer, size = syms[BUFFER]
    _, bss, bss_size = sec[".bss"]
    _, data, data_size = sec[".data"]
    holder = [name for name, (_, a, n) in sec.items() if a <= buffer < a + n and a != 0]
    problems = []
    if buffer < bss + bss_size:
        problems.append(f"the bootstrap buffer ({buffer:#x}) comes before the end of .bss ({bss + bss_size:#x})")
    if not holder or any(sec[name][0] != "NOBITS" for name in holder):
        problems.append(f"the bootstrap buffer's section {holder} is not zero-filled (NOBITS): it is in the file")
    if bss // PAGE != (data + data_size - 1) // PAGE:
        problems.append(f".bss starts at {bss:#x}, not on the page where .data ends ({data + data_size - 1:#x})")
    if size % PAGE or buffer % PAGE:
        problems.append(f"the bootstrap buffer ({buffer:#x}, {size} bytes) is not whole pages")
    if not problems:
        print(f".data ends at {data + data_size:#x}, .bss {bss:#x}+{bss_size:#x}, "
              f"bootstrap buffer {buffer:#x}+{size:#x} in {holder[0]}")
    return problems


def main():
    global READELF
    lib = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2]:
        READELF = sys.argv[2]
    sec = sections(lib)
    syms = symbols(lib)
    if ".symtab" not in sec or BUFFER not in syms or ".bss" not in sec or ".data" not in sec:
        print(f"FAIL: {lib} has no .symtab, .data or .bss, or no {BUFFER} (stripped?): nothing to check against")
        return 1
    problems = []
    # libstdc++ inside (its __gnu_cxx names): then no demangler.
    if any("9__gnu_cxx" in name for name in syms):
        demanglers = sorted(name for name in syms if "demangle" in name)
        if demanglers:
            problems.append("the face links a demangler: " + ", ".join(demanglers[:5]))
    machine = re.search(r"Machine:\s+(.*)", readelf("-h", lib))
    compiler = readelf("-p", ".comment", lib, check=False)  # which compiler built it
    if machine and "X86-64" in machine.group(1) and "clang" not in compiler:
        problems += check_layout(lib, sec, syms)
    else:
        print(f"not an x86-64 library built by GCC ({machine.group(1) if machine else '?'}): "
              "its bootstrap buffer stays in .bss; layout not checked")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
