// unipool host: background pinning (pin_thread=on) through the test pinner:
// chunks are registered ahead of demand by the pool's thread, so the
// allocating thread registers nothing; a failed registration of the thread
// is never handed out as pinned (pinned=on: dropped, the allocation pins for
// itself or fails clearly; best_effort: served pageable and counted);
// destroying the pool undoes every registration, the thread's too; many
// threads allocating while it runs get pinned memory, no range is
// registered twice and the books are exact.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host_test_util.hpp"
#include "support/test_scale.hpp"
#include "test_pinner.hpp"
#include "unipool/c/host.h"

namespace unipool::test {
namespace {

// Registrations the allocating threads made themselves.
uint64_t inline_registrations(const HostPoolStats& st) { return st.pin_registrations - st.pin_thread_registrations; }

TEST(HostPinThread, PinsChunksAheadSoTheAllocatingThreadRegistersNothing) {
  UseTestPinner use;
  {
    HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=64MiB"));
    void* first = pool.allocate(1 << 20);  // its arena's first chunk: pinned by this thread
    ASSERT_NE(first, nullptr) << HostPool::last_error();
    EXPECT_TRUE(pool.is_pinned(first));
    pool.wait_for_pinning();
    HostPoolStats st = pool.stats();
    // Two chunks ahead of the 3 MiB left free at the end: 4 + 8 MiB.
    EXPECT_EQ(st.pin_thread_registrations, 1u);
    EXPECT_EQ(inline_registrations(st), 1u);
    EXPECT_EQ(st.committed_bytes, 12 * kMiB);
    EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
    EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
    EXPECT_EQ(pinner_state().calls, 2u);

    // 6 MiB fits in what the thread pinned: this thread waits for nothing
    // and registers nothing, and the block is pinned.
    void* big = pool.allocate(6 << 20);
    ASSERT_NE(big, nullptr) << HostPool::last_error();
    EXPECT_TRUE(pool.is_pinned(big));
    pool.wait_for_pinning();
    st = pool.stats();
    EXPECT_EQ(inline_registrations(st), 1u);
    EXPECT_EQ(st.pin_thread_waits, 0u);
    EXPECT_EQ(st.pin_thread_registrations, 2u);  // and it refilled the end
    EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
    EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
    EXPECT_EQ(pinner_state().overlaps, 0u);
    EXPECT_EQ(pool.pinning_state(), PinningState::pinned);
    EXPECT_VALID(pool);
    EXPECT_EQ(pool.deallocate(first), Status::ok);
    EXPECT_EQ(pool.deallocate(big), Status::ok);
  }
  // The pool's destruction joins the thread and unregisters everything,
  // the chunks it pinned ahead included, and only what was registered.
  EXPECT_EQ(pinner_state().pinned(), 0u);
  EXPECT_EQ(pinner_state().bad_unpins, 0u);
}

TEST(HostPinThread, TheCAbiWaitsForTheThreadAndReportsItsCounts) {
  UseTestPinner use;
  unipool_host_pool_t* pool = nullptr;
  ASSERT_EQ(unipool_host_create(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=64MiB").c_str(), &pool),
            UNIPOOL_OK);
  void* first = nullptr;
  ASSERT_EQ(unipool_host_alloc(pool, 1 << 20, &first), UNIPOOL_OK) << unipool_last_error();
  unipool_host_wait_for_pinning(pool);
  unipool_host_stats_t st{};
  st.size = sizeof(st);
  ASSERT_EQ(unipool_host_stats(pool, &st), UNIPOOL_OK);
  // As through the C++ API: this thread's chunk, then 8 MiB from the thread.
  EXPECT_EQ(st.pin_registrations, 2u);
  EXPECT_EQ(st.pin_thread_registrations, 1u);
  EXPECT_EQ(st.pin_thread_waits, 0u);
  EXPECT_EQ(st.committed_bytes, 12 * kMiB);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  EXPECT_EQ(unipool_host_free(pool, first), UNIPOOL_OK);
  EXPECT_EQ(unipool_host_validate(pool), UNIPOOL_OK) << unipool_last_error();
  unipool_host_destroy(pool);
  EXPECT_EQ(pinner_state().pinned(), 0u);
}

TEST(HostPinThread, SmallBlocksGetTheirSegmentsFromChunksPinnedAhead) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=8MiB,thread_cache=size"));
  std::vector<void*> blocks;
  blocks.push_back(pool.allocate(32 << 10));
  ASSERT_NE(blocks[0], nullptr) << HostPool::last_error();
  pool.wait_for_pinning();
  const uint64_t before = inline_registrations(pool.stats());
  // Enough middle blocks for a second and a third segment.
  for (int i = 0; i < 300; ++i) {
    blocks.push_back(pool.allocate(32 << 10));
    ASSERT_NE(blocks.back(), nullptr) << HostPool::last_error();
    EXPECT_TRUE(pool.is_pinned(blocks.back()));
  }
  pool.wait_for_pinning();
  const HostPoolStats st = pool.stats();
  EXPECT_GE(st.committed_bytes, 12 * kMiB);
  EXPECT_EQ(inline_registrations(st), before);
  EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  for (void* p : blocks) EXPECT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPinThread, PinnedOnDropsAChunkTheThreadFailedToPin) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=64MiB"));
  pinner_state().fail_only = 2;  // 1: this thread's first chunk, 2: the thread's
  void* first = pool.allocate(1 << 20);
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  pool.wait_for_pinning();
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.pin_thread_registrations, 0u);
  EXPECT_EQ(st.committed_bytes, 4 * kMiB);  // nothing unpinned kept
  EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  EXPECT_VALID(pool);
  // The next growth is this thread's own, and pinned; then the thread pins
  // ahead again.
  void* big = pool.allocate(6 << 20);
  ASSERT_NE(big, nullptr) << HostPool::last_error();
  EXPECT_TRUE(pool.is_pinned(big));
  pool.wait_for_pinning();
  st = pool.stats();
  EXPECT_EQ(inline_registrations(st), 2u);
  EXPECT_EQ(st.pin_thread_registrations, 1u);
  EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_EQ(pool.deallocate(big), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPinThread, PinnedOnFailsClearlyWhenNobodyCanPin) {
  UseTestPinner use;
  HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=64MiB"));
  pinner_state().fail_from = 2;  // the thread's registration and every later one
  void* first = pool.allocate(1 << 20);
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  pool.wait_for_pinning();
  const HostAllocation refused = pool.allocate(6 << 20);
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(refused.status, Status::out_of_space);
  const std::string why = HostPool::last_error();
  EXPECT_NE(why.find("pinned=on"), std::string::npos) << why;
  EXPECT_NE(why.find("injected"), std::string::npos) << why;
  pool.wait_for_pinning();
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 2u);  // the thread's, then the allocation's own
  EXPECT_EQ(st.committed_bytes, 4 * kMiB);
  EXPECT_EQ(st.pinned_bytes, st.committed_bytes);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPinThread, BestEffortServesTheThreadsFailedChunkPageableAndCountsIt) {
  UseTestPinner use;
  HostPool pool(conf("pinned=best_effort,pin_thread=on,chunk=4MiB,max_pin=64MiB"));
  pinner_state().fail_only = 2;
  void* first = pool.allocate(1 << 20);
  ASSERT_NE(first, nullptr) << HostPool::last_error();
  EXPECT_TRUE(pool.is_pinned(first));
  pool.wait_for_pinning();
  HostPoolStats st = pool.stats();
  EXPECT_EQ(st.pin_failures, 1u);
  EXPECT_EQ(st.committed_bytes, 12 * kMiB);
  EXPECT_EQ(st.pinned_bytes, 4 * kMiB);
  EXPECT_EQ(st.pageable_bytes, 8 * kMiB);
  EXPECT_EQ(pool.pinning_state(), PinningState::partially_pinned);
  // A block over the pageable chunks is served, and says it is not pinned.
  void* big = pool.allocate(6 << 20);
  ASSERT_NE(big, nullptr) << HostPool::last_error();
  EXPECT_FALSE(pool.is_pinned(big));
  pool.wait_for_pinning();
  st = pool.stats();
  EXPECT_EQ(inline_registrations(st), 1u);
  EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
  EXPECT_EQ(pool.deallocate(first), Status::ok);
  EXPECT_EQ(pool.deallocate(big), Status::ok);
  EXPECT_VALID(pool);
}

TEST(HostPinThread, WithoutAGpuThereIsNoThreadAndNothingIsPinned) {
  UseTestPinner use;
  pinner_state().available = false;
  HostPool pool(conf("pinned=best_effort,pin_thread=on"));
  void* p = pool.allocate(1 << 20);
  ASSERT_NE(p, nullptr);
  pool.wait_for_pinning();  // returns at once: no thread
  EXPECT_FALSE(pool.is_pinned(p));
  EXPECT_EQ(pool.pinning_state(), PinningState::pageable_no_gpu);
  EXPECT_EQ(pinner_state().calls, 0u);
  EXPECT_EQ(pool.deallocate(p), Status::ok);
}

// Many threads allocate and free blocks of every size path while the
// thread pins ahead: every block is pinned (pinned=on, registrations never
// fail), no range is registered twice, the books are exact, and destroying
// the pool leaves no registration. With a limit the thread's claims count
// against it: committed bytes never pass it.
void run_threads_with_pin_thread(const std::string& extra, uint64_t limit) {
  UseTestPinner use;
  {
    HostPool pool(conf("pinned=on,pin_thread=on,chunk=4MiB,max_pin=8MiB" + extra));
    // The thread has pinned ahead once before the others start.
    void* warm = pool.allocate(1 << 20);
    ASSERT_NE(warm, nullptr) << HostPool::last_error();
    pool.wait_for_pinning();
    ASSERT_EQ(pool.stats().pin_thread_registrations, 1u);
    const int threads = 6;
    const int rounds = static_cast<int>(scaled(400, 50));
    std::vector<std::thread> workers;
    std::vector<int> unpinned(threads, 0), corrupt(threads, 0), refused(threads, 0);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937_64 rng(1234 + t);
        struct Live {
          void* p;
          size_t n;
          uint8_t tag;
        };
        std::vector<Live> live;
        for (int i = 0; i < rounds; ++i) {
          const uint64_t r = rng();
          const size_t n = r % 4 == 0 ? (size_t{1} << 20) + (r >> 8) % (5 << 20)  // large
                                      : 16 + (r >> 8) % 40000;                    // small and middle
          const HostAllocation p = pool.allocate(n);
          if (p == nullptr) {
            if (limit == 0 || p.status != Status::out_of_space) ++corrupt[t];
            ++refused[t];
          } else {
            if (!pool.is_pinned(p)) ++unpinned[t];
            const auto tag = static_cast<uint8_t>(i);
            fill(p, n < 4096 ? n : 4096, tag);
            live.push_back({p, n, tag});
          }
          if (live.size() > 8 || (!live.empty() && r % 3 == 0)) {
            const size_t k = (r >> 40) % live.size();
            if (!intact(live[k].p, live[k].n < 4096 ? live[k].n : 4096, live[k].tag)) ++corrupt[t];
            if (pool.deallocate(live[k].p) != Status::ok) ++corrupt[t];
            live[k] = live.back();
            live.pop_back();
          }
        }
        for (const Live& l : live) {
          if (pool.deallocate(l.p) != Status::ok) ++corrupt[t];
        }
      });
    }
    for (std::thread& w : workers) w.join();
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(unpinned[t], 0) << "thread " << t;
      EXPECT_EQ(corrupt[t], 0) << "thread " << t;
      if (limit == 0) {
        EXPECT_EQ(refused[t], 0) << "thread " << t;
      }
    }
    EXPECT_EQ(pool.deallocate(warm), Status::ok);
    pool.wait_for_pinning();
    EXPECT_VALID(pool);
    pool.trim();
    const HostPoolStats st = pool.stats();
    EXPECT_EQ(st.allocated_bytes, 0u);
    EXPECT_EQ(st.pin_failures, 0u);
    EXPECT_EQ(st.pinned_bytes, st.committed_bytes);  // huge blocks gone with trim
    EXPECT_EQ(pinner_state().pinned(), st.pinned_bytes);
    EXPECT_EQ(pinner_state().overlaps, 0u);
    EXPECT_LE(pinner_state().largest, 8 * kMiB);
    if (limit != 0) {
      EXPECT_LE(st.peak_committed_bytes, limit);
    }
    EXPECT_VALID(pool);
  }
  EXPECT_EQ(pinner_state().pinned(), 0u);
  EXPECT_EQ(pinner_state().bad_unpins, 0u);
}

TEST(HostPinThread, ManyThreadsAllocateWhileTheThreadPins) { run_threads_with_pin_thread("", 0); }

TEST(HostPinThread, ManyThreadsUnderALimitNeverPassIt) {
  run_threads_with_pin_thread(",limit=96MiB", 96 * kMiB);
}

}  // namespace
}  // namespace unipool::test
