// The segment store's lists on their own (csrc/host/segment_store.hpp): pages
// taken by kind, pages given back, idle segments cached up to the limit and
// then let go, and the validator that checks the lists.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "host/segment_store.hpp"

namespace unipool::host {
namespace {

// A segment's header as the engine formats it, every page free, in 4 MiB of
// aligned memory (only the header is written: Segment::of() needs the
// alignment, not the pages).
struct TestSegment {
  explicit TestSegment(uint8_t kind) {
    void* memory = std::aligned_alloc(kSegmentSize, kSegmentSize);
    if (memory == nullptr) throw std::bad_alloc();
    seg = static_cast<Segment*>(memory);
    seg->kind = kind;
    seg->page_shift = static_cast<uint8_t>(page_shift_of(kind));
    seg->page_count = static_cast<uint32_t>(kSegmentSize >> seg->page_shift);
    seg->pages_in_use = 0;
    seg->free_mask = seg->page_count == 64 ? ~uint64_t{0} : (uint64_t{1} << seg->page_count) - 1;
    seg->next = seg->prev = seg->all_next = seg->all_prev = nullptr;
    seg->in_free_list = false;
    for (uint32_t i = 0; i < seg->page_count; ++i) {
      Page* page = new (&seg->pages[i]) Page{};
      page->index = static_cast<uint8_t>(i);
      page->kind = kind;
    }
  }
  ~TestSegment() { std::free(seg); }
  TestSegment(const TestSegment&) = delete;
  TestSegment& operator=(const TestSegment&) = delete;
  Segment* seg;
};

// What the engine does with a new segment: held, formatted, open, and a
// page of it taken (the one the engine wanted). Returns that page.
Page* add(SegmentStore& store, Segment* seg) {
  store.hold_locked(seg);
  store.open_locked(seg);
  return store.take_page_locked(seg->kind);
}

std::string check(const SegmentStore& store) {
  Message why;
  return store.validate_locked(&why) ? std::string() : std::string(why.c_str());
}

TEST(HostSegmentStore, TakesPagesOfItsKindUntilTheSegmentIsFull) {
  SegmentStore store;
  LockGuard lock(store.lock());
  EXPECT_EQ(store.take_page_locked(kSmallSegment), nullptr) << "no segment yet";
  TestSegment small(kSmallSegment), middle(kMiddleSegment);
  std::set<Page*> pages = {add(store, small.seg)};
  ASSERT_NE(add(store, middle.seg), nullptr);
  EXPECT_EQ(store.take_page_locked(kDenseSegment), nullptr) << "a page of another kind";
  for (uint32_t i = 1; i < small.seg->page_count; ++i) {
    Page* page = store.take_page_locked(kSmallSegment);
    ASSERT_NE(page, nullptr);
    EXPECT_EQ(Segment::of(page), small.seg);
    pages.insert(page);
  }
  EXPECT_EQ(pages.size(), small.seg->page_count) << "a page handed out twice";
  EXPECT_EQ(store.take_page_locked(kSmallSegment), nullptr) << "the full segment is still offered";
  EXPECT_FALSE(small.seg->in_free_list);
  EXPECT_EQ(check(store), "");
  EXPECT_EQ(store.count(), 2u);
  // A page back: the full segment is offered again.
  EXPECT_EQ(store.give_page_locked(*pages.begin()), nullptr);
  EXPECT_EQ(store.take_page_locked(kSmallSegment), *pages.begin());
  EXPECT_EQ(check(store), "");
}

// A store that caches one idle segment, holding two with a page in use each.
class HostSegmentStoreOfTwo : public ::testing::Test {
 protected:
  HostSegmentStoreOfTwo() {
    store.set_cache_limit(1);
    in_a = add(store, a.seg);
    in_b = add(store, b.seg);
  }
  SegmentStore store;
  LockGuard lock{store.lock()};
  TestSegment a{kSmallSegment}, b{kSmallSegment};
  Page* in_a = nullptr;
  Page* in_b = nullptr;
};

TEST_F(HostSegmentStoreOfTwo, CachesIdleSegmentsUpToItsLimitThenLetsThemGo) {
  ASSERT_EQ(Segment::of(in_a), a.seg);
  ASSERT_EQ(Segment::of(in_b), b.seg);
  EXPECT_EQ(store.give_page_locked(in_a), nullptr) << "the first idle segment is cached";
  EXPECT_EQ(store.cached_count(), 1u);
  EXPECT_EQ(check(store), "");
  EXPECT_EQ(store.give_page_locked(in_b), b.seg) << "past the limit an idle segment goes";
  EXPECT_EQ(store.count(), 1u);
  EXPECT_EQ(store.first_locked(), a.seg);
  EXPECT_EQ(b.seg->all_next, nullptr);
  EXPECT_EQ(check(store), "");
  // The cached one serves the next segment of any kind (re-formatted).
  Segment* reused = store.take_cached_locked([](const Segment&) { return true; });
  ASSERT_EQ(reused, a.seg);
  EXPECT_EQ(store.cached_count(), 0u);
  EXPECT_EQ(store.take_cached_locked([](const Segment&) { return true; }), nullptr);
  reused->kind = kDenseSegment;
  store.open_locked(reused);
  EXPECT_EQ(Segment::of(store.take_page_locked(kDenseSegment)), a.seg);
  EXPECT_EQ(check(store), "");
}

// A store whose cache holds `n` idle segments: each added, one page of it
// taken and given back.
class HostSegmentStoreCaching : public ::testing::Test {
 protected:
  void cache_idle(uint64_t limit, int n) {
    store.set_cache_limit(limit);
    std::vector<Page*> pages;
    for (int i = 0; i < n; ++i) {
      segs.push_back(std::make_unique<TestSegment>(kSmallSegment));
      pages.push_back(add(store, segs.back()->seg));
    }
    for (Page* page : pages) ASSERT_EQ(store.give_page_locked(page), nullptr) << "an idle segment let go";
    ASSERT_EQ(store.cached_count(), static_cast<uint64_t>(n));
  }
  SegmentStore store;
  LockGuard lock{store.lock()};
  std::vector<std::unique_ptr<TestSegment>> segs;
};

TEST_F(HostSegmentStoreCaching, TakesTheCachedSegmentItsCallerPrefers) {
  ASSERT_NO_FATAL_FAILURE(cache_idle(4, 3));
  Segment* want = segs[1]->seg;
  EXPECT_EQ(store.take_cached_locked([want](const Segment& s) { return &s == want; }), want);
  // None preferred: the first cached (the last to go idle).
  EXPECT_EQ(store.take_cached_locked([](const Segment&) { return false; }), segs[2]->seg);
  EXPECT_EQ(store.cached_count(), 1u);
}

// The preference is looked for among the first eight cached segments only
// (a bounded walk under the lock): a preferred ninth is not found.
TEST_F(HostSegmentStoreCaching, LooksForThePreferredAmongTheFirstEight) {
  ASSERT_NO_FATAL_FAILURE(cache_idle(10, 10));
  // The cached list runs from the last to go idle: segs[9] first, segs[1]
  // ninth, segs[0] tenth.
  Segment* ninth = segs[1]->seg;
  Segment* tenth = segs[0]->seg;
  EXPECT_EQ(store.take_cached_locked([ninth](const Segment& s) { return &s == ninth; }), segs[9]->seg)
      << "the walk went past eight";
  // One taken: the ninth is now eighth, and is found.
  EXPECT_EQ(store.take_cached_locked([ninth](const Segment& s) { return &s == ninth; }), ninth)
      << "the walk stopped before eight";
  // Two taken: the tenth is now eighth.
  EXPECT_EQ(store.take_cached_locked([tenth](const Segment& s) { return &s == tenth; }), tenth)
      << "the walk stopped before eight";
  EXPECT_EQ(store.cached_count(), 7u);
  // Taken off the cache, a segment is the caller's to format and open again.
  for (Segment* seg : {segs[9]->seg, ninth, tenth}) {
    seg->kind = kDenseSegment;  // the same page size as small ones
    store.open_locked(seg);
    ASSERT_NE(store.take_page_locked(kDenseSegment), nullptr);
  }
  EXPECT_EQ(check(store), "");
}

TEST_F(HostSegmentStoreOfTwo, ValidateFindsListsThatDisagreeWithTheSegments) {
  ASSERT_EQ(store.give_page_locked(in_a), nullptr);
  ASSERT_EQ(check(store), "");

  b.seg->free_mask &= ~(uint64_t{1} << 5);  // a page gone from the bits
  EXPECT_NE(check(store).find("pages in use + free pages"), std::string::npos) << check(store);
  b.seg->free_mask |= uint64_t{1} << 5;

  b.seg->in_free_list = false;  // offered, but not marked so
  EXPECT_NE(check(store).find("a segment with a free page is not listed"), std::string::npos) << check(store);
  b.seg->in_free_list = true;

  a.seg->pages_in_use = 1;  // cached while a page is in use
  a.seg->free_mask &= ~uint64_t{1};
  EXPECT_NE(check(store).find("cached count differs from the idle segments"), std::string::npos) << check(store);
  a.seg->pages_in_use = 0;
  a.seg->free_mask |= 1;

  b.seg->kind = kDenseSegment;  // on the list of another kind
  EXPECT_NE(check(store).find("another kind"), std::string::npos) << check(store);
  b.seg->kind = kSmallSegment;
  EXPECT_EQ(check(store), "");
}

// A list that loops back on itself ends the walk with a message, not a hang.
TEST_F(HostSegmentStoreOfTwo, ValidateFindsALoopInAList) {
  ASSERT_EQ(store.give_page_locked(in_a), nullptr);
  ASSERT_EQ(check(store), "");

  b.seg->next = b.seg;  // the kind's list of open segments
  EXPECT_EQ(check(store), "segments: a list longer than the segments held");
  b.seg->next = nullptr;

  a.seg->next = a.seg;  // the cached list
  EXPECT_EQ(check(store), "segments: a list longer than the segments held");
  a.seg->next = nullptr;

  ASSERT_EQ(b.seg->all_next, a.seg);  // the list of all: b, then a
  a.seg->all_next = b.seg;
  EXPECT_EQ(check(store), "segments: more segments on the list of all than counted");
  a.seg->all_next = nullptr;
  EXPECT_EQ(check(store), "");
}

}  // namespace
}  // namespace unipool::host
