"""malloc of more than the machine's RAM and swap, and of 64 TiB: glibc
refuses both (NULL, ENOMEM) under the kernel's default overcommit heuristic,
and so must the face. Prints what each call gave (run_under_preload compares)."""
import ctypes
import errno
import os


def machine_bytes():
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    swap = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("SwapTotal:"):
                swap = int(line.split()[1]) * 1024
    return ram + swap


libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.calloc.restype = ctypes.c_void_p
libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
for size in (2 * machine_bytes(), 64 << 40):
    for name, call in (("malloc", lambda: libc.malloc(size)), ("calloc", lambda: libc.calloc(1, size))):
        ctypes.set_errno(0)
        p = call()
        print(name, "NULL" if p is None else "a block", errno.errorcode.get(ctypes.get_errno(), "0"))
