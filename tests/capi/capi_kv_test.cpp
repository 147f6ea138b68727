// The KV pools' C ABI (include/unipool/c/kv.h): the calls on both kinds of
// pool through one handle, and bad input for every function it declares.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "unipool/c/kv.h"

namespace {

unipool_kv_options_t options(uint64_t block_bytes = 4096, uint64_t num_blocks = 64) {
  unipool_kv_options_t o{};
  o.block_bytes = block_bytes;
  o.num_blocks = num_blocks;
  o.pinned = UNIPOOL_KV_PINNED_OFF;
  return o;
}

std::string fresh_name() {
  static int n = 0;
  return "capi." + std::to_string(getpid()) + "." + std::to_string(n++);
}

bool error_has(const char* needle) { return std::string(unipool_last_error()).find(needle) != std::string::npos; }

struct FenceCalls {
  int done = 0, released = 0;
};
int completed(void* c, uint64_t) { return static_cast<FenceCalls*>(c)->done; }
void released(void* c, uint64_t) { ++static_cast<FenceCalls*>(c)->released; }

// The same calls on an in-process and on a shared pool.
void exercise(unipool_kv_pool_t* pool) {
  int64_t ids[8];
  ASSERT_EQ(unipool_kv_alloc(pool, 8, ids), UNIPOOL_OK) << unipool_last_error();
  EXPECT_EQ(ids[7], 7);
  EXPECT_EQ(unipool_kv_block(pool, 1), static_cast<char*>(unipool_kv_block(pool, 0)) + 4096);
  EXPECT_EQ(unipool_kv_is_live(pool, 7), 1);
  EXPECT_EQ(unipool_kv_free(pool, ids, 2), UNIPOOL_OK);
  EXPECT_EQ(unipool_kv_free(pool, ids, 1), UNIPOOL_NOT_LIVE);
  EXPECT_TRUE(error_has("double free")) << unipool_last_error();
  int64_t out[3];
  ASSERT_EQ(unipool_kv_free_and_alloc(pool, ids + 2, 1, 3, out), UNIPOOL_OK);
  EXPECT_EQ(out[0], 0);  // the lowest free ids
  FenceCalls calls;
  const unipool_fence_t fence{&calls, completed, released};
  ASSERT_EQ(unipool_kv_free_after(pool, ids + 3, 2, &fence, 1), UNIPOOL_OK);
  EXPECT_EQ(unipool_kv_collect_deferred(pool), 0u);
  calls.done = 1;
  EXPECT_EQ(unipool_kv_collect_deferred(pool), 2u);
  EXPECT_EQ(calls.released, 1);
  unipool_kv_stats_t st{};
  st.size = sizeof st;
  ASSERT_EQ(unipool_kv_stats(pool, &st), UNIPOOL_OK);
  EXPECT_EQ(st.size, sizeof st);
  EXPECT_EQ(st.live_blocks, 6u);  // 8 - 2 - 1 + 3 - 2
  EXPECT_EQ(st.allocs, 11u);
  EXPECT_EQ(st.misuse_errors, 1u);
  unipool_kv_reset_peak_stats(pool);
  EXPECT_EQ(unipool_kv_pinning_state(pool), UNIPOOL_PINNING_PAGEABLE);
  EXPECT_EQ(unipool_kv_validate(pool), UNIPOOL_OK) << unipool_last_error();
}

TEST(CapiKV, InProcessPool) {
  unipool_kv_pool_t* pool = nullptr;
  const unipool_kv_options_t o = options();
  ASSERT_EQ(unipool_kv_create(&o, &pool), UNIPOOL_OK) << unipool_last_error();
  exercise(pool);
  int64_t id = 0;
  EXPECT_EQ(unipool_kv_hand_over(pool, &id, 1, getpid()), UNIPOOL_BAD_ARGUMENT);
  EXPECT_TRUE(error_has("not a shared pool"));
  unipool_kv_destroy(pool);
}

TEST(CapiKV, SharedPoolAndHandOvers) {
  const std::string name = fresh_name();
  unipool_kv_pool_t *a = nullptr, *b = nullptr;
  unipool_kv_options_t o = options();
  ASSERT_EQ(unipool_kv_create_shared(name.c_str(), &o, &a), UNIPOOL_OK) << unipool_last_error();
  exercise(a);
  unipool_kv_options_t expect{};
  expect.pinned = UNIPOOL_KV_PINNED_OFF;
  expect.block_bytes = 4096;
  ASSERT_EQ(unipool_kv_attach(name.c_str(), &expect, &b), UNIPOOL_OK) << unipool_last_error();
  int64_t ids[2];
  ASSERT_EQ(unipool_kv_alloc(a, 2, ids), UNIPOOL_OK);
  ASSERT_EQ(unipool_kv_hand_over(a, ids, 2, getpid()), UNIPOOL_OK) << unipool_last_error();
  ASSERT_EQ(unipool_kv_take_over(b, ids, 2), UNIPOOL_OK) << unipool_last_error();
  int pid = 0;
  ASSERT_EQ(unipool_kv_owner_of(b, ids[0], &pid), UNIPOOL_OK);
  EXPECT_EQ(pid, getpid());
  size_t freed = 99;
  ASSERT_EQ(unipool_kv_reclaim_dead(a, &freed), UNIPOOL_OK);
  EXPECT_EQ(freed, 0u);
  unipool_kv_destroy(b);  // detaching frees b's 2 blocks
  unipool_kv_stats_t st{};
  st.size = sizeof st;
  ASSERT_EQ(unipool_kv_stats(a, &st), UNIPOOL_OK);
  EXPECT_EQ(st.reclaimed_blocks, 2u);
  EXPECT_EQ(st.members, 1u);
  EXPECT_EQ(unipool_kv_validate(a), UNIPOOL_OK) << unipool_last_error();
  unipool_kv_destroy(a);
}

// ---- bad input: each declared function refuses with a clear error -------------

struct Case {
  const char* function;
  void (*run)(unipool_kv_pool_t* pool);
};

const Case kCases[] = {
    {"unipool_kv_create",
     [](unipool_kv_pool_t*) {
       unipool_kv_pool_t* p = nullptr;
       unipool_kv_options_t zero = options(0);
       EXPECT_EQ(unipool_kv_create(&zero, &p), UNIPOOL_BAD_ARGUMENT);
       EXPECT_TRUE(error_has("block_bytes must be > 0"));
       EXPECT_EQ(p, nullptr);
       EXPECT_EQ(unipool_kv_create(nullptr, &p), UNIPOOL_BAD_ARGUMENT);
       const unipool_kv_options_t o = options();
       EXPECT_EQ(unipool_kv_create(&o, nullptr), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_create_shared",
     [](unipool_kv_pool_t*) {
       unipool_kv_pool_t* p = nullptr;
       unipool_kv_options_t o = options();
       EXPECT_EQ(unipool_kv_create_shared("a/b", &o, &p), UNIPOOL_BAD_ARGUMENT);
       EXPECT_TRUE(error_has("A-Z a-z 0-9"));
       o.max_members = 300;
       EXPECT_EQ(unipool_kv_create_shared(fresh_name().c_str(), &o, &p), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_create_shared(nullptr, &o, &p), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_attach",
     [](unipool_kv_pool_t*) {
       unipool_kv_pool_t* p = nullptr;
       EXPECT_EQ(unipool_kv_attach(fresh_name().c_str(), nullptr, &p), UNIPOOL_BAD_ARGUMENT);
       EXPECT_TRUE(error_has("no process serves it"));
       EXPECT_EQ(unipool_kv_attach(nullptr, nullptr, &p), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_destroy", [](unipool_kv_pool_t*) { unipool_kv_destroy(nullptr); }},
    {"unipool_kv_alloc",
     [](unipool_kv_pool_t* pool) {
       int64_t ids[65];
       EXPECT_EQ(unipool_kv_alloc(pool, 65, ids), UNIPOOL_OUT_OF_SPACE);
       EXPECT_TRUE(error_has("65 blocks asked"));
       EXPECT_EQ(unipool_kv_alloc(pool, 1, nullptr), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_alloc(nullptr, 1, ids), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_free",
     [](unipool_kv_pool_t* pool) {
       const int64_t bad[] = {-1, 64, 3};
       for (const int64_t& id : bad) EXPECT_EQ(unipool_kv_free(pool, &id, 1), UNIPOOL_NOT_LIVE);
       EXPECT_EQ(unipool_kv_free(pool, nullptr, 1), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_free(nullptr, bad, 1), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_free_and_alloc",
     [](unipool_kv_pool_t* pool) {
       int64_t ids[2];
       ASSERT_EQ(unipool_kv_alloc(pool, 2, ids), UNIPOOL_OK);
       int64_t out[65];
       EXPECT_EQ(unipool_kv_free_and_alloc(pool, ids, 2, 65, out), UNIPOOL_OUT_OF_SPACE);
       EXPECT_EQ(unipool_kv_is_live(pool, static_cast<uint64_t>(ids[0])), 1);  // refused whole
       EXPECT_EQ(unipool_kv_free_and_alloc(pool, nullptr, 2, 1, out), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_free(pool, ids, 2), UNIPOOL_OK);
     }},
    {"unipool_kv_free_after",
     [](unipool_kv_pool_t* pool) {
       int64_t id;
       ASSERT_EQ(unipool_kv_alloc(pool, 1, &id), UNIPOOL_OK);
       const unipool_fence_t no_callback{nullptr, nullptr, nullptr};
       EXPECT_EQ(unipool_kv_free_after(pool, &id, 1, &no_callback, 1), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_free_after(pool, &id, 1, nullptr, 1), UNIPOOL_BAD_ARGUMENT);
       FenceCalls calls;
       const unipool_fence_t fence{&calls, completed, released};
       EXPECT_EQ(unipool_kv_free_after(pool, &id, 1, &fence, 0), UNIPOOL_BAD_ARGUMENT);  // fence 0 is no fence
       EXPECT_EQ(calls.released, 0);
       EXPECT_EQ(unipool_kv_free(pool, &id, 1), UNIPOOL_OK);
       // A double free: the pool gives the fence back at once, once.
       EXPECT_EQ(unipool_kv_free_after(pool, &id, 1, &fence, 7), UNIPOOL_NOT_LIVE);
       EXPECT_EQ(calls.released, 1);
     }},
    {"unipool_kv_collect_deferred", [](unipool_kv_pool_t*) { EXPECT_EQ(unipool_kv_collect_deferred(nullptr), 0u); }},
    {"unipool_kv_block",
     [](unipool_kv_pool_t* pool) {
       EXPECT_EQ(unipool_kv_block(pool, 64), nullptr);
       EXPECT_EQ(unipool_kv_block(nullptr, 0), nullptr);
     }},
    {"unipool_kv_is_live",
     [](unipool_kv_pool_t* pool) {
       EXPECT_EQ(unipool_kv_is_live(pool, 1u << 31), 0);
       EXPECT_EQ(unipool_kv_is_live(nullptr, 0), 0);
     }},
    {"unipool_kv_pinning_state",
     [](unipool_kv_pool_t*) { EXPECT_EQ(unipool_kv_pinning_state(nullptr), UNIPOOL_PINNING_PAGEABLE); }},
    {"unipool_kv_stats",
     [](unipool_kv_pool_t* pool) {
       unipool_kv_stats_t st{};
       EXPECT_EQ(unipool_kv_stats(pool, &st), UNIPOOL_BAD_ARGUMENT);  // size 0
       st.size = 2 * sizeof(uint64_t);                                // an older, shorter struct
       ASSERT_EQ(unipool_kv_stats(pool, &st), UNIPOOL_OK);
       EXPECT_EQ(st.size, 2 * sizeof(uint64_t));
       EXPECT_EQ(st.num_blocks, 64u);
       EXPECT_EQ(st.block_bytes, 0u);  // not written
       EXPECT_EQ(unipool_kv_stats(nullptr, &st), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_reset_peak_stats", [](unipool_kv_pool_t*) { unipool_kv_reset_peak_stats(nullptr); }},
    {"unipool_kv_validate", [](unipool_kv_pool_t*) { EXPECT_EQ(unipool_kv_validate(nullptr), UNIPOOL_BAD_ARGUMENT); }},
    {"unipool_kv_hand_over",
     [](unipool_kv_pool_t* pool) {
       int64_t id;
       ASSERT_EQ(unipool_kv_alloc(pool, 1, &id), UNIPOOL_OK);
       EXPECT_EQ(unipool_kv_hand_over(pool, &id, 1, 1), UNIPOOL_BAD_ARGUMENT);  // pid 1 is no member
       EXPECT_TRUE(error_has("not attached"));
       EXPECT_EQ(unipool_kv_hand_over(pool, nullptr, 1, 1), UNIPOOL_BAD_ARGUMENT);
       EXPECT_EQ(unipool_kv_free(pool, &id, 1), UNIPOOL_OK);
     }},
    {"unipool_kv_take_over",
     [](unipool_kv_pool_t* pool) {
       const int64_t id = 5;
       EXPECT_EQ(unipool_kv_take_over(pool, &id, 1), UNIPOOL_NOT_LIVE);
       EXPECT_TRUE(error_has("not allocated"));
       EXPECT_EQ(unipool_kv_take_over(nullptr, &id, 1), UNIPOOL_BAD_ARGUMENT);
     }},
    {"unipool_kv_reclaim_dead",
     [](unipool_kv_pool_t*) { EXPECT_EQ(unipool_kv_reclaim_dead(nullptr, nullptr), UNIPOOL_BAD_ARGUMENT); }},
    {"unipool_kv_owner_of",
     [](unipool_kv_pool_t* pool) {
       int pid = 7;
       EXPECT_EQ(unipool_kv_owner_of(pool, 64, &pid), UNIPOOL_BAD_ARGUMENT);
       EXPECT_TRUE(error_has("out of range"));
       EXPECT_EQ(unipool_kv_owner_of(pool, 0, nullptr), UNIPOOL_BAD_ARGUMENT);
     }},
};

TEST(CapiKVBadInput, EveryFunctionRefusesBadInput) {
  unipool_kv_pool_t* pool = nullptr;
  const unipool_kv_options_t o = options();
  ASSERT_EQ(unipool_kv_create_shared(fresh_name().c_str(), &o, &pool), UNIPOOL_OK) << unipool_last_error();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.function);
    c.run(pool);
    EXPECT_EQ(unipool_kv_validate(pool), UNIPOOL_OK) << unipool_last_error();
  }
  unipool_kv_destroy(pool);
}

TEST(CapiKVBadInput, EveryDeclaredFunctionHasACase) {
  std::ifstream in(std::string(UNIPOOL_C_HEADER_DIR) + "/kv.h");
  std::stringstream text;
  text << in.rdbuf();
  const std::string code = std::regex_replace(text.str(), std::regex(R"(/\*[^*]*\*+([^/*][^*]*\*+)*/)"), " ");
  std::set<std::string> declared, covered;
  const std::regex declaration(R"(\b(unipool_kv_\w+)\s*\()");
  for (auto it = std::sregex_iterator(code.begin(), code.end(), declaration); it != std::sregex_iterator(); ++it) {
    declared.insert((*it)[1]);
  }
  for (const Case& c : kCases) covered.insert(c.function);
  ASSERT_GT(declared.size(), 15u);
  EXPECT_EQ(declared, covered);
}

}  // namespace
