// unipool host: the C ABI (unipool_host_*), including deferred frees through
// C fence callbacks and errors in unipool_last_error().
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "unipool/c/host.h"

namespace {

struct Fences {
  bool done = false;
  int released = 0;
};

int fence_completed(void* ctx, uint64_t) { return static_cast<Fences*>(ctx)->done ? 1 : 0; }
void fence_release(void* ctx, uint64_t) { ++static_cast<Fences*>(ctx)->released; }

TEST(HostCapi, AllocateFreeStatsValidate) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB,thread_cache=size", &pool), UNIPOOL_OK);
  void* a = unipool_host_alloc(pool, 100);
  EXPECT_EQ(unipool_host_alloc_aligned(pool, 100, 12), nullptr);  // not a power of two, small or not
  EXPECT_NE(std::string(unipool_last_error()).find("power of two"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_alloc_aligned(pool, 100, 24), nullptr);
  void* b = unipool_host_alloc_aligned(pool, 5000, 4096);
  void* c = unipool_host_alloc(pool, 1 << 20);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
  EXPECT_GE(unipool_host_usable_size(pool, c), size_t{1} << 20);
  unipool_host_stats_t st;
  ASSERT_EQ(unipool_host_get_stats(pool, &st), UNIPOOL_OK);
  EXPECT_EQ(st.large_blocks, 1u);
  EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
            st.committed_bytes);
  EXPECT_EQ(unipool_host_is_pinned(pool, a), 0);
  EXPECT_STREQ(unipool_host_pinning_state(pool), "pageable (pinned=off)");
  EXPECT_EQ(unipool_host_free(pool, a), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_free(pool, a), UNIPOOL_NOT_LIVE);
  EXPECT_NE(std::string(unipool_last_error()).find("double free"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_free(pool, b), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_free(pool, c), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_validate(pool), UNIPOOL_OK) << unipool_last_error();
  unipool_host_trim(pool);
  unipool_host_destroy(pool);
}

TEST(HostCapi, DeferredFreeThroughCallbacks) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB", &pool), UNIPOOL_OK);
  Fences fences;
  const unipool_host_fence_t source{&fences, fence_completed, fence_release};
  void* p = unipool_host_alloc(pool, 300000);
  ASSERT_EQ(unipool_host_free_after(pool, p, &source, 7), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_collect_deferred(pool), 0u);
  unipool_host_stats_t st;
  unipool_host_get_stats(pool, &st);
  EXPECT_EQ(st.deferred_blocks, 1u);
  fences.done = true;
  EXPECT_EQ(unipool_host_collect_deferred(pool), 1u);
  EXPECT_EQ(fences.released, 1);
  EXPECT_EQ(unipool_host_free_after(pool, p, &source, 8), UNIPOOL_NOT_LIVE);
  EXPECT_EQ(unipool_host_validate(pool), UNIPOOL_OK) << unipool_last_error();
  unipool_host_destroy(pool);
}

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST(HostCapi, AllocateZeroedClearsReusedMemory) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB,huge_threshold=8MiB", &pool), UNIPOOL_OK);
  // Small, middle, large and huge: each size dirtied and freed first, so the
  // zeroed block is (usually) the same memory again and must be cleared.
  for (size_t size : {size_t{24}, size_t{3000}, size_t{20000}, size_t{300000}, size_t{9} << 20}) {
    std::vector<void*> dirty;
    for (int i = 0; i < 4; ++i) {
      void* d = unipool_host_alloc(pool, size);
      ASSERT_NE(d, nullptr) << unipool_last_error();
      std::memset(d, 0xAB, size);
      dirty.push_back(d);
    }
    for (void* d : dirty) ASSERT_EQ(unipool_host_free(pool, d), UNIPOOL_OK);
    std::vector<void*> zeroed;
    for (int i = 0; i < 4; ++i) {
      void* z = unipool_host_alloc_zeroed(pool, size);
      ASSERT_NE(z, nullptr) << size << ": " << unipool_last_error();
      EXPECT_GE(unipool_host_usable_size(pool, z), size);
      EXPECT_TRUE(all_zero(z, size)) << size;
      zeroed.push_back(z);
    }
    for (void* z : zeroed) EXPECT_EQ(unipool_host_free(pool, z), UNIPOOL_OK);
  }
  EXPECT_EQ(unipool_host_alloc_zeroed(pool, 0), nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("0 bytes"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_alloc_zeroed(nullptr, 10), nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("NULL"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_validate(pool), UNIPOOL_OK) << unipool_last_error();
  unipool_host_destroy(pool);
}

TEST(HostCapi, ConfigErrorsNameTheKey) {
  unipool_host_pool_t* pool = reinterpret_cast<unipool_host_pool_t*>(0x1);
  EXPECT_EQ(unipool_host_create("thread_cache=sometimes", &pool), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(pool, nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("thread_cache"), std::string::npos);
  EXPECT_EQ(unipool_host_config_check("bogus=3"), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("bogus"), std::string::npos);
  EXPECT_EQ(unipool_host_config_check("pinned=best_effort"), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_config_check("pinned=on,pin_thread=on"), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_config_check("pin_thread=on"), UNIPOOL_BAD_ARGUMENT);  // needs pinning
  EXPECT_NE(std::string(unipool_last_error()).find("pin_thread"), std::string::npos);
  EXPECT_EQ(unipool_host_alloc(nullptr, 10), nullptr);
}

TEST(HostCapi, DefaultPool) {
  unipool_host_pool_t* pool = unipool_host_default();
  ASSERT_NE(pool, nullptr);
  void* p = unipool_host_alloc(pool, 10);
  EXPECT_EQ(unipool_host_free(pool, p), UNIPOOL_OK);
  unipool_host_destroy(pool);  // a no-op for the default pool
  EXPECT_EQ(unipool_host_default(), pool);
}

}  // namespace
