// unipool kv: a set of block ids as a bitmap with summary levels.
//
// Level 0 holds one bit per id. Each level above holds one bit per word of
// the level below, set while that word is not zero, up to a level of one
// word. Finding the lowest word with a set bit is one count-trailing-zeros
// per level (at most 6 levels for 2^31 ids), so the cost of taking ids does
// not grow with how many are taken elsewhere in the pool; inserting or
// erasing a whole word's worth of ids is one OR or AND-NOT plus, only when
// the word turns empty or non-empty, a climb up the summary.
//
// Not thread-safe: the pool's lock guards it.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace unipool {

class KVIdBitmap {
 public:
  static constexpr uint64_t kAll = ~uint64_t{0};
  static constexpr size_t kMaxLevels = 8;  // 64^7 > 2^32 ids

  // Holds pointers into its storage: never copied.
  KVIdBitmap() = default;
  KVIdBitmap(const KVIdBitmap&) = delete;
  KVIdBitmap& operator=(const KVIdBitmap&) = delete;

  // Words of storage for `n` ids: the count, then every level, level 0 first
  // (a summary word is then one load from a pointer held here, not two
  // through a vector of vectors).
  static size_t storage_words(uint64_t n) noexcept {
    size_t total = 1;
    for (uint64_t words = (n + 63) / 64;; words = (words + 63) / 64) {
      total += words;
      if (words <= 1) return total;
    }
  }

  // `n` ids, every one set (all_set) or none, in storage of its own. Bits
  // past n stay clear forever.
  void init(uint64_t n, bool all_set) {
    owned_.assign(storage_words(n), 0);
    view(owned_.data(), n);
    fill(all_set);
  }

  // The same in `storage` (storage_words(n) words, which the caller keeps):
  // a pool shared by processes keeps it in the shared mapping.
  void init_in(uint64_t* storage, uint64_t n, bool all_set) noexcept {
    for (size_t i = 0; i < storage_words(n); ++i) storage[i] = 0;
    view(storage, n);
    fill(all_set);
  }

  // Uses a bitmap that init_in() built in `storage` (another process's).
  void view(uint64_t* storage, uint64_t n) noexcept {
    size_ = n;
    count_ = storage;
    size_t at = 1;
    levels_ = 0;
    for (uint64_t words = (n + 63) / 64;; words = (words + 63) / 64) {
      level_[levels_] = storage + at;
      level_size_[levels_++] = words;
      at += words;
      if (words <= 1) break;
    }
  }

  // Sets (all_set) or clears every id and rebuilds the summaries.
  void fill(bool all_set) noexcept {
    for (size_t l = 0; l < levels_; ++l) {
      for (size_t w = 0; w < level_size_[l]; ++w) level_[l][w] = 0;
    }
    *count_ = 0;
    if (!all_set) return;
    for (size_t w = 0; w < level_size_[0]; ++w) level_[0][w] = kAll;
    if (size_ % 64) level_[0][level_size_[0] - 1] = (uint64_t{1} << (size_ % 64)) - 1;
    *count_ = size_;
    rebuild_summaries();
  }

  // Recomputes the count and the summary levels from level 0, whose words
  // were written straight (bulk_words()).
  void rebuild_summaries() noexcept {
    uint64_t count = 0;
    for (size_t w = 0; w < level_size_[0]; ++w) count += static_cast<uint64_t>(std::popcount(level_[0][w]));
    *count_ = count;
    for (size_t l = 1; l < levels_; ++l) {
      for (size_t w = 0; w < level_size_[l]; ++w) level_[l][w] = 0;
      for (size_t w = 0; w < level_size_[l - 1]; ++w) {
        if (level_[l - 1][w]) level_[l][w / 64] |= uint64_t{1} << (w % 64);
      }
    }
  }

  uint64_t size() const noexcept { return size_; }
  uint64_t count() const noexcept { return *count_; }
  size_t num_words() const noexcept { return level_size_[0]; }
  uint64_t word(size_t w) const noexcept { return level_[0][w]; }
  bool test(uint64_t id) const noexcept { return (level_[0][id / 64] >> (id % 64)) & 1; }

  // The lowest word holding a set bit. Only when count() > 0.
  size_t lowest_word() const noexcept {
    size_t w = 0;
    for (size_t level = levels_ - 1; level > 0; --level) {
      w = w * 64 + static_cast<size_t>(std::countr_zero(level_[level][w]));
    }
    return w;
  }

  // Sets the `bits` bits of `mask` in word w; they must be clear. (The caller
  // knows how many: a popcount is a library call on baseline x86-64.)
  void insert(size_t w, uint64_t mask, uint64_t bits) noexcept {
    uint64_t& x = level_[0][w];
    const bool was_empty = x == 0;
    x |= mask;
    *count_ += bits;
    if (was_empty && mask) mark(w, true);
  }

  // Clears the `bits` bits of `mask` in word w; they must be set.
  void erase(size_t w, uint64_t mask, uint64_t bits) noexcept {
    uint64_t& x = level_[0][w];
    x &= ~mask;
    *count_ -= bits;
    if (x == 0 && mask) mark(w, false);
  }

  // Bulk insertion of ids in any order: the caller sets their bits straight
  // in bulk_words() (one OR per id, and no branch that depends on the
  // order), then reports them with bulk_inserted(), which fixes the count
  // and the summaries, before any other call. Every id's summary bit is only
  // read; a summary is climbed once per word that turned non-empty.
  uint64_t* bulk_words() noexcept { return level_[0]; }
  template <class Id>
  void bulk_inserted(const Id* ids, size_t n) noexcept {
    *count_ += n;
    if (levels_ == 1) return;
    const uint64_t* summary = level_[1];
    for (size_t i = 0; i < n; ++i) {
      const uint64_t w = static_cast<uint64_t>(ids[i]) / 64;
      if (!((summary[w / 64] >> (w % 64)) & 1)) mark(w, true);
    }
  }

  // Level `level`'s words (0: the ids), for validate().
  size_t num_levels() const noexcept { return levels_; }
  std::span<const uint64_t> level(size_t i) const noexcept { return {level_[i], level_size_[i]}; }

 private:
  // Word w of level 0 turned non-empty (set) or empty (!set): flip its bit
  // in the summary, and climb while the summary word turns likewise.
  void mark(size_t w, bool set) noexcept {
    for (size_t level = 1; level < levels_; ++level) {
      uint64_t& s = level_[level][w / 64];
      const uint64_t bit = uint64_t{1} << (w % 64);
      const bool was_empty = s == 0;
      s = set ? (s | bit) : (s & ~bit);
      if (set ? !was_empty : s != 0) return;  // the levels above already agree
      w /= 64;
    }
  }

  std::vector<uint64_t> owned_;  // the storage of init(); empty for init_in() and view()
  std::array<uint64_t*, kMaxLevels> level_{};
  std::array<size_t, kMaxLevels> level_size_{};
  size_t levels_ = 0;
  uint64_t size_ = 0;
  uint64_t* count_ = nullptr;  // storage word 0
};

// For validators: whether each summary level of b has one bit per word of
// the level below, set exactly when that word is not zero (why says where
// not).
bool kv_summaries_agree(const KVIdBitmap& b, std::string* why);

}  // namespace unipool
