// unipool host: the C ABI (unipool_host_*), including deferred frees through
// C fence callbacks and errors in unipool_last_error().
#include <gtest/gtest.h>

#include <cstddef>
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

// The block, or nullptr when the call failed (the status is checked where
// the test is about it).
void* alloc(unipool_host_pool_t* pool, size_t size, size_t alignment = 0) {
  void* p = reinterpret_cast<void*>(0x1);
  const unipool_status_t s =
      alignment == 0 ? unipool_host_alloc(pool, size, &p) : unipool_host_alloc_aligned(pool, size, alignment, &p);
  EXPECT_EQ(s == UNIPOOL_OK, p != nullptr) << "*out and the status must agree";
  return p;
}

unipool_host_stats_t stats_of(unipool_host_pool_t* pool) {
  unipool_host_stats_t st{};
  st.size = sizeof(st);
  EXPECT_EQ(unipool_host_stats(pool, &st), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(st.size, sizeof(st));
  return st;
}

TEST(HostCapi, AllocateFreeStatsValidate) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB,thread_cache=size", &pool), UNIPOOL_OK);
  void* a = alloc(pool, 100);
  void* bad = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(unipool_host_alloc_aligned(pool, 100, 12, &bad), UNIPOOL_BAD_ALIGNMENT);  // not a power of two
  EXPECT_EQ(bad, nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("power of two"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_alloc_aligned(pool, 100, 24, &bad), UNIPOOL_BAD_ALIGNMENT);
  EXPECT_EQ(unipool_host_alloc(pool, 0, &bad), UNIPOOL_ZERO_SIZE);
  EXPECT_EQ(unipool_host_alloc(pool, 10, nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("out is NULL"), std::string::npos) << unipool_last_error();
  void* b = alloc(pool, 5000, 4096);
  void* c = alloc(pool, 1 << 20);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
  EXPECT_GE(unipool_host_usable_size(pool, c), size_t{1} << 20);
  const unipool_host_stats_t st = stats_of(pool);
  EXPECT_EQ(st.large_blocks, 1u);
  EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
            st.committed_bytes);
  EXPECT_EQ(unipool_host_is_pinned(pool, a), 0);
  EXPECT_EQ(unipool_host_pinning_state(pool), UNIPOOL_PINNING_PAGEABLE);
  EXPECT_STREQ(unipool_pinning_state_string(unipool_host_pinning_state(pool)), "pageable (pinned=off)");
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
  void* p = alloc(pool, 300000);
  ASSERT_EQ(unipool_host_free_after(pool, p, &source, 7), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_collect_deferred(pool), 0u);
  EXPECT_EQ(stats_of(pool).deferred_blocks, 1u);
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
      void* d = alloc(pool, size);
      ASSERT_NE(d, nullptr) << unipool_last_error();
      std::memset(d, 0xAB, size);
      dirty.push_back(d);
    }
    for (void* d : dirty) ASSERT_EQ(unipool_host_free(pool, d), UNIPOOL_OK);
    std::vector<void*> zeroed;
    for (int i = 0; i < 4; ++i) {
      void* z = nullptr;
      ASSERT_EQ(unipool_host_alloc_zeroed(pool, size, &z), UNIPOOL_OK) << size << ": " << unipool_last_error();
      EXPECT_GE(unipool_host_usable_size(pool, z), size);
      EXPECT_TRUE(all_zero(z, size)) << size;
      zeroed.push_back(z);
    }
    for (void* z : zeroed) EXPECT_EQ(unipool_host_free(pool, z), UNIPOOL_OK);
  }
  void* z = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(unipool_host_alloc_zeroed(pool, 0, &z), UNIPOOL_ZERO_SIZE);
  EXPECT_EQ(z, nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("0 bytes"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_alloc_zeroed(nullptr, 10, &z), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("NULL"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_validate(pool), UNIPOOL_OK) << unipool_last_error();
  unipool_host_destroy(pool);
}

TEST(HostCapi, ReallocKeepsTheBytesAndRefusesClearly) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB,huge_threshold=8MiB", &pool), UNIPOOL_OK);
  void* p = alloc(pool, 100);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x3C, 100);
  // Through every size path: small, middle, large, huge, a bigger huge one.
  for (size_t size : {size_t{3000}, size_t{20000}, size_t{300000}, size_t{9} << 20, size_t{40} << 20}) {
    void* q = nullptr;
    ASSERT_EQ(unipool_host_realloc(pool, p, size, &q), UNIPOOL_OK) << size << ": " << unipool_last_error();
    const auto* b = static_cast<const unsigned char*>(q);
    for (size_t i = 0; i < 100; ++i) ASSERT_EQ(b[i], 0x3C) << size;
    EXPECT_GE(unipool_host_usable_size(pool, q), size);
    p = q;
  }
  void* q = reinterpret_cast<void*>(0x1);
  int local = 0;
  EXPECT_EQ(unipool_host_realloc(pool, &local, 10, &q), UNIPOOL_NOT_LIVE);
  EXPECT_EQ(q, nullptr);
  EXPECT_NE(std::string(unipool_last_error()).find("reallocate"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_realloc(pool, p, 0, &q), UNIPOOL_ZERO_SIZE);
  EXPECT_EQ(unipool_host_realloc(nullptr, p, 10, &q), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(unipool_host_realloc(pool, p, 10, nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_GE(unipool_host_usable_size(pool, p), size_t{40} << 20);  // still live
  EXPECT_EQ(unipool_host_free(pool, p), UNIPOOL_OK);
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
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(unipool_host_alloc(nullptr, 10, &p), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(unipool_host_create("", nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_STREQ(unipool_last_error(), "unipool_host_create: out is NULL");
}

// A caller built against an older, shorter unipool_host_stats_t: the library
// writes only what that struct holds and says how much it wrote.
TEST(HostCapi, StatsFillOnlyWhatTheCallersStructHolds) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("reserve=1GiB", &pool), UNIPOOL_OK);
  void* p = alloc(pool, 1000);
  const unipool_host_stats_t full = stats_of(pool);
  unsigned char buffer[sizeof(unipool_host_stats_t) + 16];
  std::memset(buffer, 0xEE, sizeof(buffer));
  const size_t older = offsetof(unipool_host_stats_t, allocated_bytes);  // size + requested + peak
  auto* st = reinterpret_cast<unipool_host_stats_t*>(buffer);
  st->size = older;
  ASSERT_EQ(unipool_host_stats(pool, st), UNIPOOL_OK);
  EXPECT_EQ(st->size, older);
  EXPECT_EQ(st->requested_bytes, full.requested_bytes);
  for (size_t i = older; i < sizeof(buffer); ++i)
    ASSERT_EQ(buffer[i], 0xEE) << "wrote past the caller's struct at " << i;
  st->size = 0;
  EXPECT_EQ(unipool_host_stats(pool, st), UNIPOOL_BAD_ARGUMENT);
  EXPECT_NE(std::string(unipool_last_error()).find("size"), std::string::npos) << unipool_last_error();
  EXPECT_EQ(unipool_host_stats(pool, nullptr), UNIPOOL_BAD_ARGUMENT);
  EXPECT_EQ(unipool_host_free(pool, p), UNIPOOL_OK);
  unipool_host_destroy(pool);
}

// Values a C caller can pass that name no state: unipool::Status and
// PinningState are 8 bits wide, and 256 used to read as "ok" / "pageable".
TEST(HostCapi, StringsOfValuesOutOfRange) {
  EXPECT_STREQ(unipool_status_string(static_cast<unipool_status_t>(256)), "unknown status");
  EXPECT_STREQ(unipool_status_string(static_cast<unipool_status_t>(12)), "unknown status");
  EXPECT_STREQ(unipool_status_string(UNIPOOL_FOREIGN), "the allocation belongs to another allocator");
  EXPECT_STREQ(unipool_status_string(UNIPOOL_CORRUPTED),
               "heap corruption: a free block was written after it was freed");
  EXPECT_STREQ(unipool_status_string(UNIPOOL_ASLEEP), "the memory's tag is asleep (or awake, for a wake)");
  EXPECT_STREQ(unipool_pinning_state_string(static_cast<unipool_pinning_state_t>(256)), "unknown pinning state");
  EXPECT_STREQ(unipool_pinning_state_string(static_cast<unipool_pinning_state_t>(4)), "unknown pinning state");
  EXPECT_STREQ(unipool_pinning_state_string(UNIPOOL_PINNING_PINNED), "pinned");
}

TEST(HostCapi, DefaultPool) {
  unipool_host_pool_t* pool = unipool_host_default();
  ASSERT_NE(pool, nullptr);
  void* p = alloc(pool, 10);
  EXPECT_EQ(unipool_host_free(pool, p), UNIPOOL_OK);
  unipool_host_destroy(pool);  // a no-op for the default pool
  EXPECT_EQ(unipool_host_default(), pool);
}

}  // namespace
