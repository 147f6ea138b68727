// unipool backend: reserve, commit, decommit and bind host memory with mmap,
// mprotect, madvise and the mbind system call.
#include "backend/os/os_memory.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/align.hpp"
#include "core/assert.hpp"

namespace unipool::backend::os {
namespace {

constexpr uint64_t kHugeTlbPage = uint64_t{2} << 20;
constexpr int kMpolBind = 2;             // MPOL_BIND from <linux/mempolicy.h>
constexpr unsigned kMaxNumaNodes = 1024;  // bits in the node mask we pass

CommitResult failure(const char* what) noexcept {
  CommitResult r;
  r.error = errno;
  r.what = what;
  return r;
}

}  // namespace

uint64_t page_size() noexcept {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void* reserve(uint64_t bytes, uint64_t alignment, bool accounted) noexcept {
  if (alignment < page_size()) alignment = page_size();
  // Over-reserve and trim, so the range starts on the alignment.
  const uint64_t span = bytes + alignment;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (accounted ? 0 : MAP_NORESERVE);
  void* raw = mmap(nullptr, span, PROT_NONE, flags, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = align_up(start, alignment);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  return reinterpret_cast<void*>(aligned);
}

CommitResult commit(void* p, uint64_t bytes, const CommitOptions& options) noexcept {
  CommitResult result;
  bool done = false;
  if (options.huge_pages == HugePages::hugetlb && bytes % kHugeTlbPage == 0 &&
      reinterpret_cast<uintptr_t>(p) % kHugeTlbPage == 0) {
    // Replaces the reservation with hugetlbfs pages; when the system has none
    // to give, normal pages are used and the caller counts the fallback.
    void* q = mmap(p, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB, -1, 0);
    if (q == MAP_FAILED) {
      // MAP_FIXED may have failed before or after dropping the old mapping:
      // restore the reservation either way.
      mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (options.accounted ? 0 : MAP_NORESERVE),
           -1, 0);
      result.hugetlb_fallback = true;
    } else {
      done = true;
    }
  } else if (options.huge_pages == HugePages::hugetlb) {
    result.hugetlb_fallback = true;
  }
  if (!done && mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) return failure("mprotect");
  // Advice only: a kernel without THP says EINVAL, and the pool still works.
  if (options.huge_pages == HugePages::thp && !done) {
    advise_huge_pages(p, bytes);
  } else if (options.huge_pages == HugePages::off && options.thp_from < bytes) {
    advise_huge_pages(static_cast<char*>(p) + options.thp_from, bytes - options.thp_from);
  }
  if (options.numa_node >= 0) {
    // A fresh hugetlb mapping lost the reservation's policy: bind again.
    const int err = bind_to_node(p, bytes, options.numa_node);
    if (err != 0) {
      errno = err;
      return failure("mbind");
    }
  }
  if (options.first_touch) touch_pages(p, bytes);
  result.ok = true;
  return result;
}

bool decommit(void* p, uint64_t bytes) noexcept {
  return madvise(p, bytes, MADV_DONTNEED) == 0;
}

bool advise_huge_pages(void* p, uint64_t bytes) noexcept { return madvise(p, bytes, MADV_HUGEPAGE) == 0; }
bool advise_no_huge_pages(void* p, uint64_t bytes) noexcept { return madvise(p, bytes, MADV_NOHUGEPAGE) == 0; }

bool uncommit(void* p, uint64_t bytes) noexcept {
  return mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED;
}

bool release(void* p, uint64_t bytes) noexcept { return munmap(p, bytes) == 0; }

void* resize(void* p, uint64_t old_bytes, uint64_t new_bytes) noexcept {
  UNIPOOL_ASSERT(reinterpret_cast<uintptr_t>(p) % page_size() == 0 && old_bytes % page_size() == 0,
                 "a whole mapping is resized");
  void* q = mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE);
  return q == MAP_FAILED ? nullptr : q;
}

int bind_to_node(void* p, uint64_t bytes, int node) noexcept {
  if (node < 0 || static_cast<unsigned>(node) >= kMaxNumaNodes) return EINVAL;
  unsigned long mask[kMaxNumaNodes / (8 * sizeof(unsigned long))] = {};
  mask[static_cast<unsigned>(node) / (8 * sizeof(unsigned long))] =
      1UL << (static_cast<unsigned>(node) % (8 * sizeof(unsigned long)));
  // The kernel reads maxnode - 1 bits.
  const long rc = syscall(SYS_mbind, p, bytes, kMpolBind, mask, kMaxNumaNodes + 1, 0);
  return rc == 0 ? 0 : errno;
}

void touch_pages(void* p, uint64_t bytes) noexcept {
  auto* bytes_ptr = static_cast<volatile char*>(p);
  const uint64_t step = page_size();
  for (uint64_t off = 0; off < bytes; off += step) bytes_ptr[off] = 0;
}

void* map_metadata(uint64_t bytes) noexcept {
  bytes = align_up(bytes, page_size());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void unmap_metadata(void* p, uint64_t bytes) noexcept {
  if (p == nullptr) return;
  bytes = align_up(bytes, page_size());
  munmap(p, bytes);
}

}  // namespace unipool::backend::os
