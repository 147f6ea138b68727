#include "malloc/bootstrap_arena.hpp"

#include <atomic>

#include "core/align.hpp"

namespace unipool::malloc_face {
namespace {

constexpr size_t kHeader = 16;
constexpr size_t kBytes = kBootstrapBytes;

std::atomic<size_t> g_used{0};  // constant-initialized: usable before any constructor

uintptr_t begin() noexcept { return reinterpret_cast<uintptr_t>(g_bootstrap_buffer); }

}  // namespace

// Page-aligned, and on x86-64 with GCC placed after the face's other
// zero-initialised data (.lbss follows .bss). In .bss its alignment pushed
// that data off the page the loader already writes (.data's last) and split
// it in two, around the buffer. A process whose only allocation is the C++
// runtime's at load (a preloaded /bin/true: its exception pool) then took
// six page faults in the face's data where it now takes two (the exception
// pool's page and this buffer's first): g_used's and the configuration
// flag's pages each faulted twice, read and then written. tests/malloc
// checks the layout (malloc_face_layout). Not with clang: it emits a
// variable with a section of its own as file data, never zero-filled, which
// would put the whole buffer in the file.
#if defined(__x86_64__) && defined(__ELF__) && !defined(__clang__)
#define UNIPOOL_BOOTSTRAP_SECTION __attribute__((section(".lbss.unipool_bootstrap")))
#else
#define UNIPOOL_BOOTSTRAP_SECTION
#endif
alignas(4096) UNIPOOL_BOOTSTRAP_SECTION unsigned char g_bootstrap_buffer[kBootstrapBytes];

void* BootstrapArena::allocate(size_t size, size_t alignment) noexcept {
  if (alignment < kHeader) alignment = kHeader;
  if (size > kBytes || alignment > kBytes) return nullptr;
  size_t used = g_used.load(std::memory_order_relaxed);
  for (;;) {
    // The block starts at the first aligned address leaving room for the header.
    const uintptr_t start = align_up(begin() + used + kHeader, alignment);
    const size_t end = start - begin() + align_up(size, kHeader);
    if (end > kBytes) return nullptr;
    if (g_used.compare_exchange_weak(used, end, std::memory_order_relaxed)) {
      reinterpret_cast<size_t*>(start)[-1] = size;
      return reinterpret_cast<void*>(start);
    }
  }
}

bool BootstrapArena::fits_startup_share(size_t size) noexcept {
  // Alignments above 4 KiB are rare this early; a request that needs more
  // than the share left simply builds the pool.
  constexpr size_t kSlack = kHeader + 4096;
  return size <= kStartupShare && g_used.load(std::memory_order_relaxed) + size + kSlack <= kStartupShare;
}

size_t BootstrapArena::size_of(const void* p) noexcept { return static_cast<const size_t*>(p)[-1]; }

}  // namespace unipool::malloc_face
