// tests/malloc: a program that allocates until the pool's `limit` refuses
// (run with UNIPOOL_HOST_CONF=limit=...): malloc must return NULL with
// ENOMEM, and the program must go on working once it frees.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.hpp"

namespace {
void* (*volatile g_malloc)(size_t) = std::malloc;
constexpr int kMaxBlocks = 1 << 16;  // 64 GiB of 1 MiB blocks: past any limit used
void* g_blocks[kMaxBlocks];
}  // namespace

int main() {
  int n = 0;
  errno = 0;
  while (n < kMaxBlocks && (g_blocks[n] = g_malloc(1 << 20)) != nullptr) std::memset(g_blocks[n++], 1, 1 << 20);
  MALLOC_CHECK(n < kMaxBlocks && errno == ENOMEM);
  for (int i = 0; i < n; ++i) std::free(g_blocks[i]);
  void* again = g_malloc(1 << 20);
  MALLOC_CHECK(again != nullptr);
  std::free(again);
  std::printf("the limit refused an allocation, and freeing made room again\n");
  return 0;
}
