// unipool host: a table of records keyed by address (huge blocks, deferred
// frees).
//
// Open addressing with linear probing over mmap'd slots (no heap), so a
// pointer outside the arenas is checked in O(1) without touching its memory.
// Entry is trivially copyable and starts with `uintptr_t ptr` (0 = empty,
// 1 = erased). Not thread-safe: the engine locks around it.
#pragma once

#include <cstdint>

#include "backend/os/os_memory.hpp"
#include "core/assert.hpp"

namespace unipool::host {

template <class Entry>
class PtrTable {
 public:
  Entry* find(uintptr_t ptr) noexcept {
    if (capacity_ == 0 || ptr <= 1) return nullptr;
    for (uint64_t i = index(ptr), n = 0; n < capacity_; i = (i + 1) & (capacity_ - 1), ++n) {
      if (slots_[i].ptr == ptr) return &slots_[i];
      if (slots_[i].ptr == 0) return nullptr;
    }
    return nullptr;
  }
  const Entry* find(uintptr_t ptr) const noexcept { return const_cast<PtrTable*>(this)->find(ptr); }

  // Room for one more entry, so that an erase followed by an insert cannot
  // fail (an entry re-keyed in place). false when the table could not grow
  // (no memory). Entry pointers from find() are stale after a true return.
  bool reserve_one() noexcept {
    if ((live_ + erased_ + 1) * 2 <= capacity_) return true;
    const uint64_t want = (live_ + 1) * 4 > capacity_ ? (capacity_ == 0 ? 64 : capacity_ * 2) : capacity_;
    return rehash(want);
  }

  // false when the table could not grow (no memory).
  bool insert(const Entry& entry) noexcept {
    if (!reserve_one()) return false;
    for (uint64_t i = index(entry.ptr);; i = (i + 1) & (capacity_ - 1)) {
      if (slots_[i].ptr <= 1) {
        if (slots_[i].ptr == 1) --erased_;
        slots_[i] = entry;
        ++live_;
        return true;
      }
    }
  }

  void erase(Entry* entry) noexcept {
    UNIPOOL_ASSERT(entry != nullptr && entry->ptr > 1, "erase() of a live entry found by find()");
    *entry = Entry{};
    entry->ptr = 1;
    --live_;
    ++erased_;
  }

  uint64_t size() const noexcept { return live_; }

  // Unmaps the slots (not what the entries point to).
  void release() noexcept {
    backend::os::unmap_metadata(slots_, capacity_ * sizeof(Entry));
    slots_ = nullptr;
    capacity_ = live_ = erased_ = 0;
  }

  // The live entries and the sum of bytes(entry) over them (recounts for
  // validate()).
  struct Tally {
    uint64_t entries = 0, bytes = 0;
  };
  template <class Bytes>
  Tally tally(Bytes&& bytes) const {
    Tally t;
    for_each([&](const Entry& e) {
      ++t.entries;
      t.bytes += bytes(e);
    });
    return t;
  }

  template <class F>
  void for_each(F&& f) const {
    for (uint64_t i = 0; i < capacity_; ++i) {
      if (slots_[i].ptr > 1) f(slots_[i]);
    }
  }
  // f(entry) returns true to erase it.
  template <class F>
  void erase_if(F&& f) {
    for (uint64_t i = 0; i < capacity_; ++i) {
      if (slots_[i].ptr > 1 && f(slots_[i])) erase(&slots_[i]);
    }
  }

 private:
  bool rehash(uint64_t capacity) noexcept {
    auto* fresh = static_cast<Entry*>(backend::os::map_metadata(capacity * sizeof(Entry)));
    if (fresh == nullptr) return false;
    Entry* old = slots_;
    const uint64_t old_capacity = capacity_;
    slots_ = fresh;
    capacity_ = capacity;
    live_ = erased_ = 0;
    for (uint64_t i = 0; i < old_capacity; ++i) {
      if (old[i].ptr > 1) insert(old[i]);
    }
    backend::os::unmap_metadata(old, old_capacity * sizeof(Entry));
    return true;
  }
  uint64_t index(uintptr_t ptr) const noexcept {
    return (((ptr >> 4) * 0x9E3779B97F4A7C15ull) >> 24) & (capacity_ - 1);
  }

  Entry* slots_ = nullptr;
  uint64_t capacity_ = 0;  // a power of two, or 0
  uint64_t live_ = 0;
  uint64_t erased_ = 0;
};

}  // namespace unipool::host
