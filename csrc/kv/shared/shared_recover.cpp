// unipool kv shared: the lock, the journal, and repairing the books after a
// member died.
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "kv/shared/shared_members.hpp"
#include "kv/shared/shared_state.hpp"

namespace unipool::kv_shared {
namespace {

std::atomic<TestHook> g_hook{nullptr};

void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// glibc's futex word of the mutex holds the holder's thread id; the
// kernel clears it and sets FUTEX_OWNER_DIED when the holder dies. Waiting
// on it with plain loads keeps waiters off the line until it is free.
bool held(pthread_mutex_t& m) noexcept {
  return (__atomic_load_n(&m.__data.__lock, __ATOMIC_RELAXED) & FUTEX_TID_MASK) != 0;
}

// A waiter past its yields sleeps in the kernel on the mutex, 1 ms at a
// time. Why not one pthread_mutex_lock: a waiter woken there and killed
// before it took the lock hands its wake-up to nobody, and a member that
// then takes the lock by trylock does not know of the other sleepers, so
// its unlock wakes none of them; each looks again on its own. (timedlock
// takes the wall clock; ThreadSanitizer knows no other timed lock. A clock
// set back delays only that rare look.)
int sleep_for_lock(pthread_mutex_t& m) noexcept {
  for (;;) {
    timespec until{};
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 1'000'000;
    if (until.tv_nsec >= 1'000'000'000) {
      until.tv_nsec -= 1'000'000'000;
      ++until.tv_sec;
    }
    const int rc = pthread_mutex_timedlock(&m, &until);
#if defined(__SANITIZE_THREAD__)
    // Its interceptor records only a plain success; the mutex is ours too.
    if (rc == EOWNERDEAD) {
      __tsan_mutex_pre_lock(&m, __tsan_mutex_try_lock);
      __tsan_mutex_post_lock(&m, __tsan_mutex_try_lock, 0);
    }
#endif
    if (rc != ETIMEDOUT) return rc;
  }
}

}  // namespace

void set_test_hook(TestHook hook) noexcept { g_hook.store(hook, std::memory_order_relaxed); }

void hook(HookPoint at) noexcept {
  if (TestHook h = g_hook.load(std::memory_order_relaxed)) h(at);
}

// A robust mutex is one compare-and-swap to take when free, as fast as a
// plain one. A waiter first spins on loads, then yields the core up to 128
// times: the lock guards O(batch) work, so it is usually free again within
// a yield, and an unlock makes a system call only when a waiter sleeps. A
// waiter still not through sleeps in the kernel (sleep_for_lock): with
// more members than cores, endless yielding lets every spinner run before
// a preempted holder gets the core back. Either way a dead holder is
// reported (EOWNERDEAD) and repaired here.
Lock::Lock(Local& l) noexcept : l_(l) {
  constexpr int kSpins = 64, kYields = 128;
  pthread_mutex_t& m = l.header->lock;
  int rc = EBUSY;
  for (int i = 0; i < kSpins + kYields; ++i) {
    rc = held(m) ? EBUSY : pthread_mutex_trylock(&m);
    if (rc != EBUSY) break;
    if (i < kSpins) {
      pause();
    } else {
      sched_yield();
    }
  }
  if (rc == EBUSY) rc = sleep_for_lock(m);
  if (rc == EOWNERDEAD) {
    recover(l);
    pthread_mutex_consistent(&m);
  } else if (rc != 0) {
    std::abort();  // ENOTRECOVERABLE: only if a recoverer unlocked without repairing, which recover() never does
  }
  l.header->lock_holder = l.member;
  hook(HookPoint::locked);
}

Lock::~Lock() {
  l_.header->lock_holder = kMaxMembers;
  pthread_mutex_unlock(&l_.header->lock);
}

void apply_groups(Local& l) noexcept {
  const Journal& j = l.header->journal;
  for (uint32_t k = 0; k < j.num_groups; ++k) {
    const JournalGroup& g = j.groups[k];
    const uint64_t half = g.count / 2;
    if (g.run) {
      std::fill(l.owners + g.first, l.owners + g.first + half, g.target);
      hook(HookPoint::mid_batch);
      std::fill(l.owners + g.first + half, l.owners + g.first + g.count, g.target);
    } else {
      const uint32_t* ids = l.journal_ids + g.at;
      for (uint64_t i = 0; i < half; ++i) l.owners[ids[i]] = g.target;
      hook(HookPoint::mid_batch);
      for (uint64_t i = half; i < g.count; ++i) l.owners[ids[i]] = g.target;
    }
  }
}

void commit(Local& l, const Counters& after) noexcept {
  Journal& j = l.header->journal;
  j.counters = after;
  j.state.store(JournalState::apply, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // no owner write above the state
  apply_groups(l);
  l.header->counters = after;
  end_journal(l);
}

void end_journal(Local& l) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  l.header->journal.num_groups = 0;
  l.header->journal.state.store(JournalState::idle, std::memory_order_release);
}

void undo_journal(Local& l) noexcept {
  Journal& j = l.header->journal;
  // Backwards: an id repeated in the entry gets its first saved word.
  for (size_t i = j.n; i-- > 0;) l.owners[l.journal_ids[i]] = l.journal_previous[i];
  l.header->counters = j.counters;
  end_journal(l);
}

void rebuild_index(Local& l) noexcept {
  const uint64_t n = l.num_blocks();
  uint64_t* free_words = l.index.free.bulk_words();
  Counters& c = l.counters();
  c.live = c.deferred = 0;
  for (uint64_t w = 0; w * 64 < n; ++w) {
    uint64_t free_bits = 0, live_bits = 0;
    for (uint64_t id = w * 64; id < n && id < w * 64 + 64; ++id) {
      const uint32_t word = l.owners[id];
      const uint64_t bit = uint64_t{1} << (id % 64);
      if (owner::is_free(word)) {
        free_bits |= bit;
      } else if (owner::is_deferred(word)) {
        ++c.deferred;
      } else {
        live_bits |= bit;
        ++c.live;
      }
    }
    free_words[w] = free_bits;
    l.index.live[w] = live_bits;
  }
  l.index.free.rebuild_summaries();
}

void recover(Local& l) noexcept {
  Header& h = *l.header;
  switch (h.journal.state.load(std::memory_order_acquire)) {
    case JournalState::apply:  // finish the call
      apply_groups(l);
      h.counters = h.journal.counters;
      end_journal(l);
      break;
    case JournalState::undo: undo_journal(l); break;
    case JournalState::reclaim:  // a reclaim cut short: finish it
      reclaim_member(l, h.journal.member, /*died=*/true);
      break;
    case JournalState::idle:  // groups added, not committed: nothing happened
      h.journal.num_groups = 0;
      break;
  }
  rebuild_index(l);
  ++h.recoveries;
  const uint32_t holder = h.lock_holder;
  if (holder < h.max_members && holder != l.member && h.members[holder].state == MemberState::attached) {
    await_exit(h.members[holder], 2000);
  }
  h.lock_holder = kMaxMembers;
  reclaim_dead_members(l);  // the holder among them
}

// Idempotent, so that a reclaimer killed halfway is finished by the next
// locker from the journal's redo entry: the count of blocks to free is
// taken once, before the first is freed.
uint64_t reclaim_member(Local& l, uint32_t m, bool died) noexcept {
  Header& h = *l.header;
  Journal& j = h.journal;
  // Set first: a reclaim of the creator cut short must still close the pool.
  if (m == h.creator && h.lifetime == static_cast<uint32_t>(SharedKVLifetime::creator)) {
    h.closed.store(1, std::memory_order_release);
  }
  if (j.state.load(std::memory_order_acquire) != JournalState::reclaim) {
    uint64_t k = 0;
    for (uint64_t id = 0; id < l.num_blocks(); ++id) {
      const uint32_t w = l.owners[id];
      k += !owner::is_free(w) && (owner::member(w) == m || (owner::in_transit(w) && owner::receiver(w) == m));
    }
    j.member = m;
    j.n = k;
    j.counters = h.counters;
    j.state.store(JournalState::reclaim, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  for (uint64_t id = 0; id < l.num_blocks(); ++id) {
    const uint32_t w = l.owners[id];
    if (!owner::is_free(w) && (owner::member(w) == m || (owner::in_transit(w) && owner::receiver(w) == m))) {
      l.owners[id] = owner::kFree;
    }
    if (id == l.num_blocks() / 2) hook(HookPoint::reclaiming);
  }
  const uint64_t freed = j.n;
  h.counters = j.counters;
  h.counters.reclaimed += freed;
  rebuild_index(l);
  h.members[m].state = MemberState::empty;
  h.dead_members += died ? 1 : 0;
  end_journal(l);
  return freed;
}

uint64_t reclaim_dead_members(Local& l) noexcept {
  Header& h = *l.header;
  uint64_t freed = 0;
  for (uint32_t m = 0; m < h.max_members; ++m) {
    if (h.members[m].state != MemberState::attached || m == l.member) continue;
    if (member_alive(h.members[m])) continue;
    freed += reclaim_member(l, m, /*died=*/true);
  }
  return freed;
}

}  // namespace unipool::kv_shared
