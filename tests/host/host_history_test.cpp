// unipool host: the pool's history. Off by default; on, every alloc and free
// of the HostPool face and every pin, unpin and failed pin, in order, in a
// ring of max_entries; JSON through the C++ and C faces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "host_test_util.hpp"
#include "test_pinner.hpp"
#include "unipool/c/host.h"

namespace unipool::test {
namespace {

std::vector<std::string> actions(const std::vector<HostHistoryEntry>& entries) {
  std::vector<std::string> out;
  for (const HostHistoryEntry& e : entries) out.emplace_back(to_string(e.action));
  return out;
}

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(HostHistory, OffByDefaultRecordsNothing) {
  HostPool pool(kTestConf);
  EXPECT_FALSE(pool.history_enabled());
  pool.deallocate(pool.allocate(100));
  EXPECT_TRUE(pool.history().empty());
  EXPECT_EQ(pool.history_json(), "{\"max_entries\": 0, \"entries\": []}");
}

// A count whose bytes wrap past 2^64: (2^59 + 1) x 32 bytes used to map 32
// bytes for a ring of 2^59 + 1 entries, and the 129th event wrote past it.
TEST(HostHistory, RingsWhoseBytesWrapAreRefused) {
  HostPool pool(kTestConf);
  for (size_t n : {SIZE_MAX / sizeof(HostHistoryEntry) + 1, (size_t{1} << 59) + 1, size_t{1} << 62, SIZE_MAX}) {
    EXPECT_FALSE(pool.record_history(n)) << n;
    EXPECT_FALSE(pool.history_enabled()) << n;
    EXPECT_EQ(pool.history_max_entries(), 0u) << n;
  }
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(pool.deallocate(pool.allocate(64).ptr), Status::ok);
  EXPECT_TRUE(pool.history().empty());
  EXPECT_VALID(pool);
}

TEST(HostHistory, AllocAndFreeInOrderWithSizes) {
  HostPool pool(kTestConf);
  ASSERT_TRUE(pool.record_history(100));
  EXPECT_TRUE(pool.history_enabled());
  void* small = pool.allocate(100);
  void* large = pool.allocate(3 << 20, 4096);
  void* zeroed = pool.allocate_zeroed(5000);
  ASSERT_TRUE(small && large && zeroed);
  const size_t large_usable = pool.usable_size(large);
  EXPECT_EQ(pool.deallocate(large), Status::ok);
  EXPECT_EQ(pool.deallocate(large), Status::not_live);  // refused: not recorded
  const std::vector<HostHistoryEntry> h = pool.history();
  ASSERT_EQ(actions(h), (std::vector<std::string>{"alloc", "alloc", "alloc", "free"}));
  EXPECT_EQ(h[0].address, addr(small));
  EXPECT_EQ(h[0].size, 100u);
  EXPECT_EQ(h[1].address, addr(large));
  EXPECT_EQ(h[1].size, size_t{3} << 20);
  EXPECT_EQ(h[2].size, 5000u);
  EXPECT_EQ(h[3].address, addr(large));
  EXPECT_EQ(h[3].size, large_usable);
  for (size_t i = 1; i < h.size(); ++i) EXPECT_LE(h[i - 1].time_ns, h[i].time_ns);
  EXPECT_GT(h[0].time_ns, int64_t{1600000000} * 1000000000);  // since the epoch
  pool.deallocate(small);
  pool.deallocate(zeroed);
  EXPECT_VALID(pool);
}

TEST(HostHistory, TheRingKeepsTheNewestAndZeroStops) {
  HostPool pool(kTestConf);
  ASSERT_TRUE(pool.record_history(3));
  std::vector<void*> blocks;
  for (size_t i = 1; i <= 5; ++i) blocks.push_back(pool.allocate(i * 1000));
  std::vector<HostHistoryEntry> h = pool.history();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].size, 3000u);
  EXPECT_EQ(h[2].size, 5000u);
  EXPECT_EQ(h[2].address, addr(blocks[4]));
  EXPECT_EQ(pool.history_max_entries(), 3u);
  ASSERT_TRUE(pool.record_history(0));
  EXPECT_FALSE(pool.history_enabled());
  for (void* p : blocks) pool.deallocate(p);
  EXPECT_TRUE(pool.history().empty());
  EXPECT_VALID(pool);
}

TEST(HostHistory, PinningEventsAreRecorded) {
  UseTestPinner use;
  HostPool pool(conf("pinned=best_effort,chunk=4MiB,max_pin=8MiB"));
  ASSERT_TRUE(pool.record_history(1000));
  pinner_state().fail_only = 1;                 // the first chunk stays pageable
  void* first = pool.allocate((4 << 20) - 64);  // fills that chunk
  void* huge = pool.allocate(20 << 20);         // its own mapping, pinned in pieces of 8 MiB
  ASSERT_TRUE(first && huge);
  pool.deallocate(huge);
  pool.trim();  // the huge mapping goes: unpinned
  const std::vector<HostHistoryEntry> h = pool.history();
  uint64_t pinned = 0, failed = 0, pins = 0, unpins = 0;
  for (const HostHistoryEntry& e : h) {
    if (e.action == HostHistoryAction::pin) pinned += e.size, ++pins;
    if (e.action == HostHistoryAction::pin_failed) failed += e.size;
    if (e.action == HostHistoryAction::unpin) ++unpins;
  }
  EXPECT_EQ(h.front().action, HostHistoryAction::pin_failed);  // before the block it was for
  EXPECT_EQ(failed, uint64_t{4} << 20);
  EXPECT_EQ(pins, pool.stats().pin_registrations) << "every registration is in the history";
  EXPECT_EQ(pool.stats().pinned_bytes, pinner_state().pinned());
  EXPECT_GE(unpins, 3u);  // the 20 MiB mapping's three pieces
  pool.deallocate(first);
  EXPECT_VALID(pool);
}

TEST(HostHistory, TheCFaceGivesTheJson) {
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create("", &pool), UNIPOOL_OK);
  ASSERT_EQ(unipool_host_record_history(pool, 10), UNIPOOL_OK);
  void* p = nullptr;
  ASSERT_EQ(unipool_host_alloc(pool, 256, &p), UNIPOOL_OK);
  ASSERT_EQ(unipool_host_free(pool, p), UNIPOOL_OK);
  size_t needed = 0;
  EXPECT_EQ(unipool_host_history_json(pool, nullptr, 0, &needed), UNIPOOL_OUT_OF_SPACE);
  std::string buf(needed, '\0');
  ASSERT_EQ(unipool_host_history_json(pool, buf.data(), buf.size(), &needed), UNIPOOL_OK);
  EXPECT_EQ(buf.size(), needed);
  const std::string json(buf.c_str());
  EXPECT_EQ(json.rfind("{\"max_entries\": 10, \"entries\": [{\"action\": \"alloc\", \"address\": " +
                           std::to_string(addr(p)) + ", \"size\": 256, \"time_ns\": ",
                       0),
            0u)
      << json;
  EXPECT_NE(json.find("{\"action\": \"free\", \"address\": " + std::to_string(addr(p))), std::string::npos) << json;
  EXPECT_EQ(unipool_host_record_history(nullptr, 10), UNIPOOL_BAD_ARGUMENT);
  unipool_host_destroy(pool);
}

}  // namespace
}  // namespace unipool::test
