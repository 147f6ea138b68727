// unipool kv: KVBlockPool::validate(), every invariant, for tests.
#include <bit>
#include <mutex>
#include <string>

#include "kv/kv_state.hpp"

namespace unipool {
namespace {

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

uint64_t popcount(uint64_t x) { return static_cast<uint64_t>(std::popcount(x)); }

}  // namespace

// Each summary level has one bit per word of the level below, set exactly
// when that word is not zero, and nothing past the last such word.
bool kv_summaries_agree(const KVIdBitmap& b, std::string* why) {
  for (size_t level = 1; level < b.num_levels(); ++level) {
    const std::span<const uint64_t> below = b.level(level - 1);
    const std::span<const uint64_t> here = b.level(level);
    if (here.size() != (below.size() + 63) / 64) return fail(why, "summary level " + std::to_string(level) + " has the wrong size");
    for (size_t w = 0; w < here.size() * 64; ++w) {
      const bool bit = (here[w / 64] >> (w % 64)) & 1;
      const bool nonzero = w < below.size() && below[w] != 0;
      if (bit != nonzero) {
        return fail(why, "summary level " + std::to_string(level) + " bit " + std::to_string(w) + " says " +
                             (bit ? "non-empty" : "empty") + " but the word below is " + (nonzero ? "not" : "") + " empty");
      }
    }
  }
  if (b.level(b.num_levels() - 1).size() != 1) return fail(why, "the top summary level is not one word");
  return true;
}

bool KVBlockPool::validate(std::string* why) const {
  const State& s = *state_;
  std::lock_guard lock(s.mutex);
  const size_t words = (num_blocks_ + 63) / 64;
  if (s.free.size() != num_blocks_ || s.free.num_words() != words || s.live.size() != words) {
    return fail(why, "bitmaps have the wrong size");
  }
  const uint64_t tail = num_blocks_ % 64 ? ~((uint64_t{1} << (num_blocks_ % 64)) - 1) : 0;
  uint64_t free_bits = 0, live_bits = 0;
  for (size_t w = 0; w < words; ++w) {
    const uint64_t f = s.free.word(w), l = s.live[w];
    if (f & l) return fail(why, "a block is both free and live (word " + std::to_string(w) + ")");
    free_bits += popcount(f);
    live_bits += popcount(l);
  }
  if ((s.free.word(words - 1) | s.live[words - 1]) & tail) return fail(why, "a bit past the last block is set");
  if (free_bits != s.free.count()) {
    return fail(why, "free bitmap holds " + std::to_string(free_bits) + " blocks but counts " + std::to_string(s.free.count()));
  }
  if (!kv_summaries_agree(s.free, why)) return false;
  if (live_bits != s.live_count) return fail(why, "live count disagrees with the live bitmap");

  // Deferred blocks: in neither bitmap, each in exactly one deferred batch.
  if (s.deferred_ids.size() != s.deferred_count) return fail(why, "deferred count disagrees with the deferred batches");
  if (free_bits + live_bits + s.deferred_count != num_blocks_) return fail(why, "block counts do not add up");
  std::vector<uint64_t> seen(words, 0);
  for (uint32_t id : s.deferred_ids) {
    const uint64_t bit = uint64_t{1} << (id % 64);
    if (id >= num_blocks_) return fail(why, "deferred batch holds out-of-range id " + std::to_string(id));
    if ((s.free.word(id / 64) | s.live[id / 64]) & bit) {
      return fail(why, "a deferred batch holds block " + std::to_string(id) + ", which is free or live");
    }
    if (seen[id / 64] & bit) return fail(why, "deferred batches hold block " + std::to_string(id) + " twice");
    seen[id / 64] |= bit;
  }
  size_t next = 0;
  for (const State::DeferredBatch& b : s.batches) {
    if (b.first != next) return fail(why, "deferred batches do not tile the deferred id list");
    next += b.count;
  }
  if (next != s.deferred_ids.size()) return fail(why, "deferred batches do not cover the deferred id list");
  if (s.allocs != s.frees + s.live_count + s.deferred_count) return fail(why, "allocs != frees + live + deferred");
  if (s.peak_live < s.live_count) return fail(why, "peak below current");
  return true;
}

}  // namespace unipool
