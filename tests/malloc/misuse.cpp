// tests/malloc: misuse that the face must stop with a clear message.
//
//   misuse double_free | foreign | interior | realloc_foreign | realloc_interior
//          | realloc_freed | reallocarray_foreign | cfree_foreign | delete_foreign
//          | delete_array_foreign
//   misuse write_after_free SIZE garbage|zero owner|other_thread
//
// Run under LD_PRELOAD only: each case must abort (SIGABRT) with a line on
// stderr naming the call and the pointer (run_under_preload.py checks it).
// write_after_free frees a block (from this thread or another; the owner
// then frees more, so the block leaves its block cache for its page's list),
// writes over its first 8 bytes and allocates until the pool reaches it; it prints
// "victim=<address>" on stderr first, for the check of the message.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

namespace {
void* (*volatile g_malloc)(size_t) = std::malloc;
void (*volatile g_free)(void*) = std::free;
void* (*volatile g_realloc)(void*, size_t) = std::realloc;
void* (*volatile g_reallocarray)(void*, size_t, size_t) = reallocarray;
void (*volatile g_delete)(void*) noexcept = ::operator delete;
void (*volatile g_delete_array)(void*) noexcept = ::operator delete[];

// cfree is no longer declared by glibc's headers; the face still exports it.
void cfree_of(void* p) {
  auto* cfree = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_DEFAULT, "cfree"));
  if (cfree != nullptr) cfree(p);
}

// The cases on realloc and its relatives (false: not one of them).
bool realloc_misuse(const std::string& what, char* not_heap) {
  if (what == "realloc_foreign") {
    void* volatile r = g_realloc(not_heap + 32, 100);
    (void)r;
  } else if (what == "realloc_interior") {
    char* p = static_cast<char*>(g_malloc(4096));
    void* volatile r = g_realloc(p + 64, 8192);
    (void)r;
  } else if (what == "realloc_freed") {
    void* p = g_malloc(64);
    g_free(p);
    void* volatile r = g_realloc(p, 128);
    (void)r;
  } else if (what == "reallocarray_foreign") {
    void* volatile r = g_reallocarray(not_heap + 32, 10, 10);
    (void)r;
  } else {
    return false;
  }
  return true;
}

// The cases on free and its relatives (false: not one of them).
bool free_misuse(const std::string& what, char* not_heap) {
  if (what == "double_free") {
    void* p = g_malloc(64);
    g_free(p);
    g_free(p);
  } else if (what == "foreign") {
    g_free(not_heap + 16);
  } else if (what == "interior") {
    char* p = static_cast<char*>(g_malloc(4096));
    g_free(p + 64);
  } else if (what == "cfree_foreign") {
    cfree_of(not_heap + 16);
  } else if (what == "delete_foreign") {
    g_delete(not_heap + 48);
  } else if (what == "delete_array_foreign") {
    g_delete_array(not_heap + 48);
  } else {
    return false;
  }
  return true;
}

// Returns only if the pool never noticed the write.
void write_after_free(size_t size, const std::string& value, const std::string& freed_by) {
  void* keep = g_malloc(size);
  void* victim = g_malloc(size);
  char line[64];
  const int n = std::snprintf(line, sizeof line, "victim=%p\n", victim);
  if (write(STDERR_FILENO, line, static_cast<size_t>(n)) != n) return;
  if (freed_by == "owner") {
    // The owner's free goes to its block cache, where nothing reads the
    // link: more frees of the size push it out onto its page's list.
    void* pushers[128];
    for (void*& p : pushers) p = g_malloc(size);
    g_free(victim);
    for (void* p : pushers) g_free(p);
  } else {
    std::thread([victim] { g_free(victim); }).join();
  }
  const uint64_t word = value == "zero" ? 0 : 0x4141414141414141ull;
  std::memcpy(victim, &word, sizeof word);  // the write after free
  for (int i = 0; i < 20000; ++i) {
    if (g_malloc(size) == nullptr) break;
  }
  g_free(keep);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string what = argv[1];
  static char not_heap[256];
  if (what == "write_after_free" && argc == 5) {
    write_after_free(std::strtoull(argv[2], nullptr, 10), argv[3], argv[4]);
  } else if (!free_misuse(what, not_heap) && !realloc_misuse(what, not_heap)) {
    return 2;
  }
  std::printf("misuse %s was not caught\n", what.c_str());
  return 1;
}
