// unipool host: many threads: producer/consumer with cross-thread frees,
// threads that come and go, every policy. At the end every block is freed
// and accounted, and validate() holds.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "host/lock.hpp"
#include "host_test_util.hpp"
#include "support/rng.hpp"
#include "support/test_scale.hpp"

namespace unipool::test {
namespace {

// A bounded queue of blocks handed from producers to consumers.
class Channel {
 public:
  struct Item {
    void* p;
    size_t size;
    uint8_t tag;
  };
  void push(Item item) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < 256; });
    items_.push_back(item);
    not_empty_.notify_one();
  }
  bool pop(Item* item) {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return false;
    *item = items_.front();
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Item> items_;
  bool closed_ = false;
};

size_t pick_size(Rng& rng) {
  const uint64_t r = rng.below(100);
  if (r < 50) return 1 + rng.below(1024);
  if (r < 90) return 1025 + rng.below(31 << 10);
  if (r < 99) return (32 << 10) + rng.below(300 << 10);
  return (8 << 20) + 4096;
}

struct ProducerConsumerCase {
  int threads;
  const char* policy;
};

class HostProducerConsumer : public ::testing::TestWithParam<ProducerConsumerCase> {};

TEST_P(HostProducerConsumer, CrossThreadFreesLoseNoByte) {
  const int threads = GetParam().threads;
  HostPool pool(conf(std::string("thread_cache=") + GetParam().policy));
  const int producers = threads / 2, consumers = threads - producers;
  const uint64_t per_producer = scaled(4000, 200) / static_cast<uint64_t>(producers);
  Channel channel;
  std::atomic<uint64_t> corrupt{0}, failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < producers; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(1000 + static_cast<uint64_t>(t));
      std::vector<void*> local;  // some blocks are freed by their producer
      for (uint64_t i = 0; i < per_producer; ++i) {
        const size_t size = pick_size(rng);
        void* p = pool.allocate(size);
        if (p == nullptr) {
          failed.fetch_add(1);
          continue;
        }
        const auto tag = static_cast<uint8_t>(i + static_cast<uint64_t>(t));
        const size_t n = std::min<size_t>(size, 64);
        fill(p, n, tag);
        if (rng.below(4) == 0) {
          local.push_back(p);
          if (local.size() > 32) {
            pool.deallocate(local.front());
            local.erase(local.begin());
          }
        } else {
          channel.push({p, n, tag});
        }
      }
      for (void* p : local) pool.deallocate(p);
    });
  }
  for (int t = 0; t < consumers; ++t) {
    workers.emplace_back([&] {
      Channel::Item item{};
      while (channel.pop(&item)) {
        if (!intact(item.p, item.size, item.tag)) corrupt.fetch_add(1);
        if (pool.deallocate(item.p) != Status::ok) corrupt.fetch_add(1);
        // Consumers allocate too, so their heaps see remote frees back.
        void* q = pool.allocate(item.size + 1);
        if (q) pool.deallocate(q);
      }
    });
  }
  for (int t = 0; t < producers; ++t) workers[static_cast<size_t>(t)].join();
  channel.close();
  for (size_t t = static_cast<size_t>(producers); t < workers.size(); ++t) workers[t].join();
  EXPECT_EQ(corrupt.load(), 0u);
  EXPECT_EQ(failed.load(), 0u);
  const HostPoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.small_blocks + st.middle_blocks + st.large_blocks + st.huge_blocks, 0u);
  EXPECT_EQ(st.allocated_bytes + st.deferred_bytes + st.cached_bytes + st.overhead_bytes + st.arena_free_bytes,
            st.committed_bytes);
  EXPECT_VALID(pool);
}

INSTANTIATE_TEST_SUITE_P(Threads, HostProducerConsumer,
                         ::testing::Values(ProducerConsumerCase{2, "performance"}, ProducerConsumerCase{4, "performance"},
                                           ProducerConsumerCase{8, "unlimited"}, ProducerConsumerCase{16, "size"},
                                           ProducerConsumerCase{32, "performance"}, ProducerConsumerCase{4, "none"},
                                           ProducerConsumerCase{32, "none"}),
                         [](const auto& info) {
                           return std::to_string(info.param.threads) + "_" + info.param.policy;
                         });

TEST(HostThreads, ThreadChurnGivesCachedMemoryBack) {
  HostPool pool(conf("thread_cache=unlimited"));
  std::vector<void*> survivors;  // allocated by exited threads, freed later
  std::mutex m;
  const int rounds = static_cast<int>(scaled(40, 6));
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        Rng rng(static_cast<uint64_t>(round * 16 + t));
        std::vector<void*> mine;
        for (int i = 0; i < 300; ++i) mine.push_back(pool.allocate(1 + rng.below(20000)));
        for (size_t i = 0; i < mine.size(); ++i) {
          if (i % 10 == 0) {
            std::lock_guard lock(m);
            survivors.push_back(mine[i]);
          } else {
            pool.deallocate(mine[i]);
          }
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  // The exited threads' heaps went back: with unlimited caches they would
  // otherwise hold every page they ever touched.
  HostPoolStats st = pool.stats();
  EXPECT_GT(st.allocated_bytes, 0u);
  EXPECT_VALID(pool);
  for (void* p : survivors) ASSERT_EQ(pool.deallocate(p), Status::ok);
  st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  // Everything the threads cached is back in segments or arenas: only the
  // current thread's (empty) heap may keep pages.
  EXPECT_VALID(pool);
  pool.trim();
  st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.cached_bytes, 0u) << "pages still held after every thread exited";
  EXPECT_VALID(pool);
}

TEST(HostThreads, ExitedThreadsPagesAreReusedNotLeaked) {
  HostPool pool(conf("thread_cache=performance"));
  uint64_t committed_after_first = 0;
  for (int round = 0; round < static_cast<int>(scaled(20, 5)); ++round) {
    std::thread([&] {
      std::vector<void*> v;
      for (int i = 0; i < 2000; ++i) v.push_back(pool.allocate(100));
      for (void* p : v) pool.deallocate(p);
    }).join();
    if (round == 0) committed_after_first = pool.stats().committed_bytes;
  }
  EXPECT_EQ(pool.stats().committed_bytes, committed_after_first);
  EXPECT_VALID(pool);
}

// A thread that allocates only large blocks keeps their tally in a heap of
// its own; the pool's figures count them while the thread lives and after
// it exits, when another thread with a heap (and a tally) of its own frees
// them.
TEST(HostThreads, ALargeOnlyThreadsBlocksAreCountedExactly) {
  HostPool pool(kTestConf);
  void* mine = pool.allocate(64);  // this thread's heap
  constexpr size_t kSize = 300 << 10;
  std::vector<void*> blocks;
  std::mutex m;
  std::condition_variable cv;
  bool ready = false, counted = false;
  std::thread t([&] {
    for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(kSize));
    EXPECT_EQ(pool.deallocate(blocks.back()), Status::ok);
    blocks.pop_back();
    std::unique_lock lock(m);
    ready = true;
    cv.notify_one();
    cv.wait(lock, [&] { return counted; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return ready; });
  }
  const HostPoolStats live = pool.stats();
  EXPECT_EQ(live.large_blocks, 4u);
  EXPECT_EQ(live.requested_bytes, 4 * kSize + 64);
  EXPECT_VALID(pool);
  {
    std::lock_guard lock(m);
    counted = true;
  }
  cv.notify_one();
  t.join();
  EXPECT_EQ(pool.stats().large_blocks, 4u);
  for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().large_blocks, 0u);
  EXPECT_EQ(pool.stats().requested_bytes, 64u);
  EXPECT_VALID(pool);
  ASSERT_EQ(pool.deallocate(mine), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
}

// The arena lock takes and drops itself with plain stores while the
// process has one thread. A thread made while it is held (the process then
// has two) must wait for it, and be woken by the unlock.
TEST(HostThreads, AThreadMadeWhileTheArenaLockIsHeldWaitsForIt) {
#if __has_include(<sys/single_threaded.h>)
  if (!__libc_single_threaded) GTEST_SKIP() << "other tests made threads in this process (ctest runs each alone)";
#endif
  host::FutexMutex m;
  m.lock();  // in a process of one thread (ctest runs each test alone): a plain store
  std::atomic<bool> inside{false};
  std::thread t([&] {
    m.lock();
    inside = true;
    m.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(inside.load());  // still held: the thread waits
  m.unlock();
  t.join();
  EXPECT_TRUE(inside.load());
  m.lock();  // free again, with two threads made: the locked path
  m.unlock();
}

TEST(HostThreads, FreeOnAnotherThreadAfterOwnerExited) {
  HostPool pool(kTestConf);
  std::vector<void*> blocks;
  std::thread([&] {
    for (int i = 0; i < 1000; ++i) blocks.push_back(pool.allocate(static_cast<size_t>(16 + i % 3000)));
  }).join();
  EXPECT_VALID(pool);
  for (void* p : blocks) ASSERT_EQ(pool.deallocate(p), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
  // The shared pages are adopted by a new thread's heap.
  std::thread([&] {
    void* p = pool.allocate(16);
    EXPECT_NE(p, nullptr);
    pool.deallocate(p);
  }).join();
  EXPECT_VALID(pool);
}

uint64_t pages_of_class(const HostPool& pool, uint64_t block_size) {
  const HostPoolStats st = pool.stats();
  for (uint32_t c = 0; c < st.num_classes; ++c) {
    if (st.classes[c].block_size == block_size) return st.classes[c].pages;
  }
  ADD_FAILURE() << "no class of " << block_size << " bytes";
  return 0;
}

// Blocks another thread freed on a full page are handed out again before
// the current page carves fresh ones: a producer whose consumer frees its
// blocks then keeps the pages it has resident, rather than touching a new
// page's worth of blocks first.
TEST(HostThreads, RemoteFreesOnAFullPageComeBeforeFreshBlocks) {
  HostPool pool(kTestConf);
  constexpr size_t kSize = 4096;
  // Fill a page (the second: a segment's first page is shorter, behind its
  // header): the block that needs the next page is on the new one.
  std::vector<void*> kept, first_page;
  void* on_next = nullptr;
  while (on_next == nullptr) {
    void* p = pool.allocate(kSize);
    ASSERT_NE(p, nullptr);
    const uint64_t pages = pages_of_class(pool, kSize);
    if (pages == 3)
      on_next = p;
    else
      (pages == 2 ? first_page : kept).push_back(p);
    ASSERT_LT(kept.size() + first_page.size(), 1000u);
  }
  ASSERT_GE(first_page.size(), 8u);
  std::thread([&] {
    for (void* p : first_page) ASSERT_EQ(pool.deallocate(p), Status::ok);
  }).join();
  // The new page carved a few blocks at once; past those, the full page's
  // blocks come back.
  const std::set<void*> freed(first_page.begin(), first_page.end());
  std::vector<void*> again;
  size_t fresh = 0;
  for (size_t i = 0; i < first_page.size(); ++i) {
    again.push_back(pool.allocate(kSize));
    ASSERT_NE(again.back(), nullptr);
    if (freed.count(again.back()) == 0) ++fresh;
  }
  EXPECT_LT(fresh, first_page.size() / 2) << "fresh blocks were carved while freed ones waited";
  EXPECT_EQ(pages_of_class(pool, kSize), 3u);
  EXPECT_VALID(pool);
  for (void* p : again) ASSERT_EQ(pool.deallocate(p), Status::ok);
  for (void* p : kept) ASSERT_EQ(pool.deallocate(p), Status::ok);
  ASSERT_EQ(pool.deallocate(on_next), Status::ok);
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
  EXPECT_VALID(pool);
}

}  // namespace
}  // namespace unipool::test
