// unipool device pool: the blocks handed out, and the table that finds a
// block from its address on free.
//
// Blocks live in a slab (a vector with a free list) so the steady state does
// no heap allocation; the address table is open addressing with backward-
// shift deletion, again allocation-free once grown. std::unordered_map would
// allocate a node on every allocate and free: the hot path's largest cost.
#pragma once

#include <cstdint>
#include <vector>

#include "unipool/fence.hpp"

namespace unipool::device {

inline constexpr uint32_t kNoIndex = ~uint32_t{0};

struct Block {
  uint64_t address = 0;    // device address (arena base + offset)
  uint64_t offset = 0;     // inside the arena's range allocator
  uint64_t handle = 0;     // the range allocator's handle
  uint64_t size = 0;       // extent: 512-rounded (a whole segment if never split)
  uint64_t requested = 0;  // what the caller asked for
  StreamHandle stream = 0; // allocated on
  uint32_t arena = kNoIndex;
  uint32_t pending = 0;    // fences to complete before the range is free again
  bool freed = false;      // deallocated; waiting on `pending` fences
  std::vector<StreamHandle> other_streams;  // record_stream(), without `stream`
};

class BlockSlab {
 public:
  uint32_t acquire() {
    ++live_;
    if (!spare_.empty()) {
      const uint32_t id = spare_.back();
      spare_.pop_back();
      return id;
    }
    blocks_.emplace_back();
    return static_cast<uint32_t>(blocks_.size() - 1);
  }
  void release(uint32_t id) {
    Block& b = blocks_[id];
    b.arena = kNoIndex;
    b.pending = 0;
    b.freed = false;
    b.other_streams.clear();  // keeps its capacity for the next user
    spare_.push_back(id);
    --live_;
  }
  Block& operator[](uint32_t id) { return blocks_[id]; }
  const Block& operator[](uint32_t id) const { return blocks_[id]; }
  uint64_t live() const noexcept { return live_; }
  // Calls f(id, block) for every block in use.
  template <class F>
  void for_each(F&& f) const {
    for (uint32_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i].arena != kNoIndex) f(i, blocks_[i]);
    }
  }

 private:
  std::vector<Block> blocks_;
  std::vector<uint32_t> spare_;
  uint64_t live_ = 0;
};

// address (never 0) -> block id.
class AddressMap {
 public:
  uint32_t find(uint64_t key) const noexcept {
    if (slots_.empty() || key == 0) return kNoIndex;  // 0 marks an empty slot
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return kNoIndex;
    }
  }

  void insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
    ++size_;
  }

  bool erase(uint64_t key) noexcept {
    if (slots_.empty() || key == 0) return false;
    size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: pull later entries of the probe run into the hole unless
    // their home lies cyclically in (hole, their slot].
    for (size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const size_t k = home(slots_[j].key);
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return true;
  }

  uint64_t size() const noexcept { return size_; }

 private:
  struct Slot {
    uint64_t key = 0;
    uint32_t value = 0;
  };

  size_t home(uint64_t key) const noexcept {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t capacity = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64u - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != 0) insert(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  uint64_t size_ = 0;
};

}  // namespace unipool::device
