// tests/malloc: misuse that the face must stop with a clear message.
//
//   misuse double_free | foreign | interior | realloc_foreign | delete_foreign
//
// Run under LD_PRELOAD only: each case must abort (SIGABRT) with a line on
// stderr naming the call and the pointer (run_under_preload.py checks it).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace {
void* (*volatile g_malloc)(size_t) = std::malloc;
void (*volatile g_free)(void*) = std::free;
void* (*volatile g_realloc)(void*, size_t) = std::realloc;
void (*volatile g_delete)(void*) noexcept = ::operator delete;
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string what = argv[1];
  static char not_heap[256];
  if (what == "double_free") {
    void* p = g_malloc(64);
    g_free(p);
    g_free(p);
  } else if (what == "foreign") {
    g_free(not_heap + 16);
  } else if (what == "interior") {
    char* p = static_cast<char*>(g_malloc(4096));
    g_free(p + 64);
  } else if (what == "realloc_foreign") {
    void* volatile r = g_realloc(not_heap + 32, 100);
    (void)r;
  } else if (what == "delete_foreign") {
    g_delete(not_heap + 48);
  } else {
    return 2;
  }
  std::printf("misuse %s was not caught\n", what.c_str());
  return 1;
}
