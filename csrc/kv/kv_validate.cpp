// unipool kv: KVBlockPool::validate(), every invariant, for tests.
#include <string>

#include "kv/kv_state.hpp"

namespace unipool {
namespace {

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

}  // namespace

bool KVBlockPool::validate(std::string* why) const {
  const State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (s.block_state.size() != num_blocks_) return fail(why, "block state table has the wrong size");
  uint64_t count[4] = {};
  for (uint8_t st : s.block_state) {
    if (st > State::freeing) return fail(why, "unknown block state");
    ++count[st];
  }
  if (count[State::freeing] != 0) return fail(why, "a block is left in the 'freeing' state");
  if (count[State::free_block] != s.free_ids.size()) {
    return fail(why, "free stack holds " + std::to_string(s.free_ids.size()) + " ids but " +
                         std::to_string(count[State::free_block]) + " blocks are free");
  }
  std::vector<uint8_t> seen(num_blocks_, 0);
  for (uint32_t id : s.free_ids) {
    if (id >= num_blocks_) return fail(why, "free stack holds out-of-range id " + std::to_string(id));
    if (s.block_state[id] != State::free_block) return fail(why, "free stack holds non-free block " + std::to_string(id));
    if (seen[id]++) return fail(why, "free stack holds block " + std::to_string(id) + " twice");
  }
  if (count[State::live] != s.live_count) return fail(why, "live count disagrees with block states");
  if (count[State::deferred] != s.deferred_count || s.deferred_ids.size() != s.deferred_count) {
    return fail(why, "deferred count disagrees with block states or deferred batches");
  }
  size_t next = 0;
  for (const State::DeferredBatch& b : s.batches) {
    if (b.first != next) return fail(why, "deferred batches do not tile the deferred id list");
    next += b.count;
    for (size_t i = 0; i < b.count; ++i) {
      if (s.block_state[s.deferred_ids[b.first + i]] != State::deferred) {
        return fail(why, "a deferred batch holds a block that is not deferred");
      }
    }
  }
  if (next != s.deferred_ids.size()) return fail(why, "deferred batches do not cover the deferred id list");
  if (s.live_count + s.deferred_count + s.free_ids.size() != num_blocks_) return fail(why, "block counts do not add up");
  if (s.allocs != s.frees + s.live_count + s.deferred_count) return fail(why, "allocs != frees + live + deferred");
  if (s.peak_live < s.live_count) return fail(why, "peak below current");
  return true;
}

}  // namespace unipool
