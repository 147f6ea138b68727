// tests/malloc: what every allocation function promises, checked in a
// program that must pass with glibc and under LD_PRELOAD of the face alike.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>

#include "check.hpp"

namespace {

// Through volatile pointers: the compiler may not fold these calls away.
void* (*volatile g_malloc)(size_t) = std::malloc;
void* (*volatile g_calloc)(size_t, size_t) = std::calloc;
void* (*volatile g_realloc)(void*, size_t) = std::realloc;
void* (*volatile g_reallocarray)(void*, size_t, size_t) = reallocarray;

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

void zero_size() {
  std::set<void*> seen;
  for (int i = 0; i < 100; ++i) {
    void* p = g_malloc(0);
    MALLOC_CHECK(p != nullptr);
    MALLOC_CHECK(seen.insert(p).second);  // unique
  }
  for (void* p : seen) std::free(p);
  std::free(nullptr);
}

void failures() {
  errno = 0;
  MALLOC_CHECK(g_malloc(SIZE_MAX) == nullptr && errno == ENOMEM);
  errno = 0;
  MALLOC_CHECK(g_malloc(SIZE_MAX / 2) == nullptr && errno == ENOMEM);
  errno = 0;
  MALLOC_CHECK(g_calloc(SIZE_MAX / 2, 3) == nullptr && errno == ENOMEM);  // overflow
  errno = 0;
  MALLOC_CHECK(g_reallocarray(nullptr, SIZE_MAX / 2, 3) == nullptr && errno == ENOMEM);
  void* keep = g_malloc(100);
  std::memset(keep, 7, 100);
  errno = 0;
  MALLOC_CHECK(g_realloc(keep, SIZE_MAX - 4096) == nullptr && errno == ENOMEM);
  MALLOC_CHECK(static_cast<unsigned char*>(keep)[99] == 7);  // untouched on failure
  std::free(keep);
}

// Bad arguments to the other entry points fail alike on glibc and the
// face: NULL and errno, or posix_memalign's result with *out untouched.
void bad_arguments() {
  auto* keep = static_cast<unsigned char*>(g_malloc(100));
  std::memset(keep, 7, 100);
  errno = 0;
  MALLOC_CHECK(g_reallocarray(keep, SIZE_MAX / 2, 3) == nullptr && errno == ENOMEM);  // overflow
  MALLOC_CHECK(keep[99] == 7);
  errno = 0;
  MALLOC_CHECK(g_calloc(SIZE_MAX, SIZE_MAX) == nullptr && errno == ENOMEM);
  void* q = keep;
  MALLOC_CHECK(posix_memalign(&q, 0, 10) == EINVAL && q == keep);
  MALLOC_CHECK(posix_memalign(&q, 64, SIZE_MAX) == ENOMEM && q == keep);
  errno = 0;
  MALLOC_CHECK(aligned_alloc(64, SIZE_MAX) == nullptr && errno == ENOMEM);
  errno = 0;
  MALLOC_CHECK(memalign(SIZE_MAX, 10) == nullptr && errno == EINVAL);
  errno = 0;
  MALLOC_CHECK(memalign(64, SIZE_MAX) == nullptr && errno == ENOMEM);
  errno = 0;
  MALLOC_CHECK(valloc(SIZE_MAX) == nullptr && errno == ENOMEM);
  errno = 0;
  MALLOC_CHECK(pvalloc(SIZE_MAX) == nullptr && errno == ENOMEM);
  std::free(keep);
}

// What only the face promises (glibc before 2.38 rounds aligned_alloc's
// alignment up, and reads a header in front of any pointer it is given).
void bad_arguments_under_the_face() {
  if (dlsym(RTLD_DEFAULT, "unipool_malloc_face_version") == nullptr) return;
  errno = 0;
  MALLOC_CHECK(aligned_alloc(24, 100) == nullptr && errno == EINVAL);
  errno = 0;
  MALLOC_CHECK(aligned_alloc(0, 100) == nullptr && errno == EINVAL);
  static char not_heap[64];
  MALLOC_CHECK(malloc_usable_size(not_heap + 16) == 0);
  auto* p = static_cast<char*>(g_malloc(4096));
  MALLOC_CHECK(malloc_usable_size(p + 64) == 0);  // interior
  std::free(p);
}

void calloc_zeroes() {
  // Dirty some memory, free it, and check calloc hands it back zeroed.
  for (size_t size : {size_t{24}, size_t{1000}, size_t{20000}, size_t{300000}, size_t{5} << 20}) {
    void* dirty = g_malloc(size);
    std::memset(dirty, 0xAB, size);
    std::free(dirty);
    auto* p = static_cast<unsigned char*>(g_calloc(1, size));
    MALLOC_CHECK(p != nullptr);
    for (size_t i = 0; i < size; ++i) MALLOC_CHECK(p[i] == 0);
    std::free(p);
  }
}

uint64_t minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_minflt);
}

void calloc_of_fresh_memory_faults_no_page() {
  // Memory new from the OS reads zero: clearing it would fault in all of it
  // (glibc and the face both map these sizes fresh). Then every byte is zero.
  for (size_t size : {size_t{48} << 20, size_t{96} << 20}) {
    const uint64_t before = minor_faults();
    auto* p = static_cast<unsigned char*>(g_calloc(1, size));
    const uint64_t faults = minor_faults() - before;
    MALLOC_CHECK(p != nullptr);
    MALLOC_CHECK(faults < size / 4096 / 8);  // clearing would fault every page
    for (size_t i = 0; i < size; i += 512) MALLOC_CHECK(p[i] == 0);
    MALLOC_CHECK(p[size - 1] == 0);
    std::free(p);
  }
}

void realloc_keeps_data() {
  auto* p = static_cast<unsigned char*>(g_realloc(nullptr, 10));
  for (int i = 0; i < 10; ++i) p[i] = static_cast<unsigned char>(i);
  for (size_t size = 11; size < (size_t{64} << 20); size = size * 5 / 2) {
    p = static_cast<unsigned char*>(g_realloc(p, size));
    MALLOC_CHECK(p != nullptr && malloc_usable_size(p) >= size);
    for (int i = 0; i < 10; ++i) MALLOC_CHECK(p[i] == i);
  }
  p = static_cast<unsigned char*>(g_realloc(p, 5));  // shrink
  for (int i = 0; i < 5; ++i) MALLOC_CHECK(p[i] == i);
  MALLOC_CHECK(g_realloc(p, 0) == nullptr);  // glibc: frees
}

void alignments() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t a = 1; a <= (size_t{1} << 22); a <<= 1) {
    for (size_t size : {size_t{1}, a, a * 3 + 1, size_t{100000}}) {
      void* p = aligned_alloc(a, size);
      MALLOC_CHECK(p != nullptr && aligned(p, a) && malloc_usable_size(p) >= size);
      std::memset(p, 1, size);
      std::free(p);
      void* q = nullptr;
      if (a >= sizeof(void*)) {
        MALLOC_CHECK(posix_memalign(&q, a, size) == 0 && aligned(q, a));
        std::free(q);
      }
      q = memalign(a, size);
      MALLOC_CHECK(q != nullptr && aligned(q, a));
      std::free(q);
    }
  }
  void* q = nullptr;
  MALLOC_CHECK(posix_memalign(&q, 24, 10) == EINVAL);
  MALLOC_CHECK(posix_memalign(&q, 4, 10) == EINVAL);
  void* m = memalign(48, 100);  // rounded up to 64
  MALLOC_CHECK(m != nullptr && aligned(m, 64));
  std::free(m);
  void* v = valloc(10);
  MALLOC_CHECK(v != nullptr && aligned(v, page));
  std::free(v);
  void* pv = pvalloc(page + 1);
  MALLOC_CHECK(pv != nullptr && aligned(pv, page) && malloc_usable_size(pv) >= 2 * page);
  std::free(pv);
}

// Alignments above 4 MiB (the pool's segment) up to 4 GiB: glibc serves
// them for small sizes, and free must take the block back.
void big_alignments() {
  for (size_t a = size_t{8} << 20; a <= (size_t{1} << 32); a <<= 1) {
    for (size_t size : {size_t{100}, size_t{5000}, size_t{1} << 20}) {
      void* q = nullptr;
      MALLOC_CHECK(posix_memalign(&q, a, size) == 0 && aligned(q, a) && malloc_usable_size(q) >= size);
      std::memset(q, 5, size);
      std::free(q);
      void* p = aligned_alloc(a, size);
      MALLOC_CHECK(p != nullptr && aligned(p, a) && malloc_usable_size(p) >= size);
      std::memset(p, 6, size);
      std::free(p);
    }
  }
}

void usable_sizes() {
  MALLOC_CHECK(malloc_usable_size(nullptr) == 0);
  for (size_t size = 1; size < (size_t{80} << 20); size = size * 7 / 3 + 1) {
    auto* p = static_cast<unsigned char*>(g_malloc(size));
    const size_t usable = malloc_usable_size(p);
    MALLOC_CHECK(usable >= size);
    std::memset(p, 0x5A, usable);  // every usable byte is ours to write
    std::free(p);
  }
}

// operator new of more than any machine has throws the std::bad_alloc the
// program catches.
// True when the call throws std::bad_alloc.
template <class New>
bool throws_bad_alloc(New call) {
  try {
    void* volatile p = call();
    (void)p;
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}
bool huge_new_throws() {
  return throws_bad_alloc([] { return ::operator new(SIZE_MAX / 2); });
}
bool odd_aligned_new_throws() {
  return throws_bad_alloc([] { return ::operator new(100, std::align_val_t(24)); });
}

void cxx_operators() {
  int* one = new int(5);
  delete one;
  int* many = new int[1000];
  delete[] many;
  struct alignas(256) Wide {
    char c[300];
  };
  Wide* w = new Wide;
  MALLOC_CHECK(aligned(w, 256));
  delete w;
  Wide* ws = new Wide[3];
  MALLOC_CHECK(aligned(ws, 256));
  delete[] ws;
  void* nt = ::operator new(64, std::nothrow);
  MALLOC_CHECK(nt != nullptr);
  ::operator delete(nt, std::nothrow);
  void* sized = ::operator new(100);
  ::operator delete(sized, 100);
  void* al = ::operator new(100, std::align_val_t(4096));
  MALLOC_CHECK(aligned(al, 4096));
  ::operator delete(al, 100, std::align_val_t(4096));
  MALLOC_CHECK(::operator new(SIZE_MAX / 2, std::nothrow) == nullptr);
  MALLOC_CHECK(::operator new[](SIZE_MAX / 2, std::align_val_t(64), std::nothrow) == nullptr);
  // align_val_t is not checked before the face: an alignment that is not a
  // power of two is refused, not served from a class of another alignment.
  for (size_t bad : {size_t{12}, size_t{24}, size_t{48}, size_t{96}, size_t{3000}}) {
    MALLOC_CHECK(::operator new(100, std::align_val_t(bad), std::nothrow) == nullptr);
    MALLOC_CHECK(::operator new[](5000, std::align_val_t(bad), std::nothrow) == nullptr);
  }
  MALLOC_CHECK(huge_new_throws());
}

// The new-handler the program installs is the one operator new calls, and
// the std::bad_alloc it throws is the one the program catches; a handler
// that throws makes a nothrow new return nullptr.
int g_handler_calls = 0;
void give_up() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);  // the next failure throws
}
void throwing_handler() { throw std::bad_alloc(); }

void new_handlers() {
  std::set_new_handler(give_up);
  MALLOC_CHECK(huge_new_throws() && g_handler_calls == 1);
  // No handler can make 24 a power of two: it throws without one call.
  std::set_new_handler(give_up);
  MALLOC_CHECK(odd_aligned_new_throws() && g_handler_calls == 1);
  std::set_new_handler(throwing_handler);
  MALLOC_CHECK(::operator new(SIZE_MAX / 2, std::nothrow) == nullptr);
  MALLOC_CHECK(::operator new[](SIZE_MAX / 2, std::align_val_t(64), std::nothrow) == nullptr);
  std::set_new_handler(nullptr);
}

}  // namespace

int main() {
  zero_size();
  failures();
  bad_arguments();
  bad_arguments_under_the_face();
  calloc_zeroes();
  calloc_of_fresh_memory_faults_no_page();
  realloc_keeps_data();
  alignments();
  big_alignments();
  usable_sizes();
  cxx_operators();
  new_handlers();
  std::printf("api semantics ok\n");
  return 0;
}
