// unipool kv shared: the lock, the journal, and repairing the books after a
// member died.
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

// glibc's futex word of the mutex: 0 while unlocked. Waiting on it with
// plain loads keeps waiters off the line until a release.
bool looks_locked(pthread_mutex_t& m) noexcept { return __atomic_load_n(&m.__data.__lock, __ATOMIC_RELAXED) != 0; }

}  // namespace

void set_test_hook(TestHook hook) noexcept { g_hook.store(hook, std::memory_order_relaxed); }

void hook(HookPoint at) noexcept {
  if (TestHook h = g_hook.load(std::memory_order_relaxed)) h(at);
}

// A robust mutex is one compare-and-swap to take when free, as fast as a
// plain one; when taken, spin a little on loads before sleeping in the
// kernel, since the pool holds it for O(batch) work.
Lock::Lock(Local& l) noexcept : l_(l) {
  pthread_mutex_t& m = l.header->lock;
  int rc = EBUSY;
  for (int spins = 0; spins < 100 && rc == EBUSY; ++spins) {
    while (looks_locked(m) && spins++ < 100) pause();
    rc = pthread_mutex_trylock(&m);
  }
  if (rc == EBUSY) rc = pthread_mutex_lock(&m);
  if (rc == EOWNERDEAD) {
    recover(l);
    pthread_mutex_consistent(&m);
  } else if (rc != 0) {
    std::abort();  // ENOTRECOVERABLE: only if a recoverer unlocked without repairing, which recover() never does
  }
  hook(HookPoint::locked);
}

Lock::~Lock() { pthread_mutex_unlock(&l_.header->lock); }

void end_journal(Local& l) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  l.header->journal.state.store(JournalState::idle, std::memory_order_release);
}

void undo_journal(Local& l) noexcept {
  Journal& j = l.header->journal;
  // Backwards: an id repeated in the entry gets its first saved word.
  for (size_t i = j.n; i-- > 0;) l.owners[l.journal_ids[i]] = l.journal_previous[i];
  l.header->counters = j.saved;
  end_journal(l);
}

void rebuild_index(Local& l) noexcept {
  const uint64_t n = l.num_blocks();
  uint64_t* free_words = l.index.free.bulk_words();
  Counters& c = l.counters();
  c.live = c.deferred = c.transit = 0;
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
        c.transit += owner::in_transit(word) ? 1 : 0;
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
    case JournalState::undo: undo_journal(l); break;
    case JournalState::redo:  // a reclaim cut short: finish it
      reclaim_member(l, h.journal.member, /*died=*/true);
      break;
    case JournalState::idle: break;
  }
  rebuild_index(l);
  ++h.recoveries;
  reclaim_dead_members(l);  // the holder that died among them
}

// Idempotent, so that a reclaimer killed halfway is finished by the next
// locker from the journal's redo entry: the count of blocks to free is
// taken once, before the first is freed.
uint64_t reclaim_member(Local& l, uint32_t m, bool died) noexcept {
  Header& h = *l.header;
  Journal& j = h.journal;
  if (j.state.load(std::memory_order_acquire) != JournalState::redo) {
    uint64_t k = 0;
    for (uint64_t id = 0; id < l.num_blocks(); ++id) {
      const uint32_t w = l.owners[id];
      k += !owner::is_free(w) && (owner::member(w) == m || (owner::in_transit(w) && owner::receiver(w) == m));
    }
    j.member = m;
    j.n = k;
    j.saved = h.counters;
    j.state.store(JournalState::redo, std::memory_order_release);
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
  h.counters = j.saved;
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
    if (m == h.creator && h.lifetime == static_cast<uint32_t>(SharedKVLifetime::creator)) {
      h.closed.store(1, std::memory_order_release);
    }
  }
  return freed;
}

}  // namespace unipool::kv_shared
