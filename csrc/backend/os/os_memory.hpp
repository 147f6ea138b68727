// unipool backend: the operating system's memory, for the host pool.
//
// Address space is reserved once (PROT_NONE, MAP_NORESERVE: costs nothing;
// see reserve() for the accounted variant),
// committed in chunks (read-write, optionally transparent or hugetlbfs huge
// pages, optionally bound to a NUMA node and touched by the pool) and
// decommitted with MADV_DONTNEED. NUMA binding is the raw mbind system call,
// so the core links no libnuma. Nothing here allocates from the heap.
#pragma once

#include <cstdint>

namespace unipool::backend::os {

enum class HugePages : uint8_t { off, thp, hugetlb };

struct CommitOptions {
  HugePages huge_pages = HugePages::off;
  int numa_node = -1;        // -1: no binding
  bool first_touch = false;  // write one byte per page now
  // With huge_pages off: madvise(MADV_HUGEPAGE) from this many bytes into
  // the range to its end (before any first touch); ~0: nowhere.
  uint64_t thp_from = ~uint64_t{0};
  bool accounted = false;    // the range was reserved with accounted = true
};

struct CommitResult {
  bool ok = false;
  bool hugetlb_fallback = false;  // hugetlb asked, normal pages used
  int error = 0;                  // errno of the call that failed
  const char* what = "";          // which call failed ("mprotect", "mbind", ...)
};

uint64_t page_size() noexcept;

// Reserves `bytes` of address space aligned to `alignment` (a power of two,
// at least the page size). nullptr on failure (errno kept).
//
// accounted = true leaves out MAP_NORESERVE. The PROT_NONE reservation is
// still free, but commit() (mprotect to read-write) is then charged to the
// kernel's commit accounting, as glibc's mmap of a big malloc is: under the
// default heuristic (vm.overcommit_memory=0) a range larger than RAM + swap
// fails with ENOMEM (measured: 30 GiB refused, 20 GiB allowed on a 23 GiB
// machine without swap; 1 TiB and 64 TiB refused), with overcommit=1 it is
// allowed and with 2 the strict limit applies, in each mode as for glibc.
// Without it a request no memory can back "succeeds" and the kernel kills
// the process when it touches the pages. Arenas, which commit chunk by
// chunk, keep MAP_NORESERVE.
void* reserve(uint64_t bytes, uint64_t alignment, bool accounted = false) noexcept;
// Makes [p, p + bytes) usable. p and bytes are multiples of 2 MiB when
// hugetlb pages are asked.
CommitResult commit(void* p, uint64_t bytes, const CommitOptions& options) noexcept;
// Gives the physical pages of [p, p + bytes) back; the range stays usable
// (it reads as zeros and faults pages in again).
bool decommit(void* p, uint64_t bytes) noexcept;

// Asks for transparent huge pages over [p, p + bytes) from its next first
// touch on (madvise MADV_HUGEPAGE); pages already touched stay as they are.
// advise_no_huge_pages takes that back (MADV_NOHUGEPAGE).
bool advise_huge_pages(void* p, uint64_t bytes) noexcept;
bool advise_no_huge_pages(void* p, uint64_t bytes) noexcept;

// Turns a committed range back into reserved address space (PROT_NONE, no
// pages), whatever pages backed it.
bool uncommit(void* p, uint64_t bytes) noexcept;
// Returns the range to the OS.
bool release(void* p, uint64_t bytes) noexcept;
// Grows or shrinks the committed mapping [p, p + old_bytes) to new_bytes
// (mremap): the kernel moves page tables, not bytes, and the mapping may
// move. Returns its start, or nullptr (the mapping unchanged) when the kernel
// refuses (no memory to account the growth, no room). Not for hugetlb pages.
void* resize(void* p, uint64_t old_bytes, uint64_t new_bytes) noexcept;
// Binds [p, p + bytes) to `node` (MPOL_BIND). Returns 0 or an errno.
int bind_to_node(void* p, uint64_t bytes, int node) noexcept;
// Writes one byte per page so that the pages are faulted in now.
void touch_pages(void* p, uint64_t bytes) noexcept;

// Metadata memory for the engine itself: zeroed, read-write, page-rounded.
void* map_metadata(uint64_t bytes) noexcept;
void unmap_metadata(void* p, uint64_t bytes) noexcept;

}  // namespace unipool::backend::os
