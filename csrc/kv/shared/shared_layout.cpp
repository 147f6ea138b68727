// unipool kv shared: where each part of the mapping lies.
#include "kv/shared/shared_layout.hpp"

#include "core/align.hpp"
#include "kv/kv_id_bitmap.hpp"

namespace unipool::kv_shared {

Offsets layout_offsets(uint64_t num_blocks, uint64_t stride, uint64_t alignment, uint64_t page) noexcept {
  Offsets o{};
  const uint64_t words = (num_blocks + 63) / 64;
  o.owners = round_up(sizeof(Header), 64);
  o.journal_ids = round_up(o.owners + 4 * num_blocks, 64);
  // An entry may hold a batch freed and one allocated (free_and_alloc):
  // twice the blocks at most.
  o.journal_previous = round_up(o.journal_ids + 8 * num_blocks, 64);
  o.free = round_up(o.journal_previous + 8 * num_blocks, 64);
  o.live = round_up(o.free + 8 * KVIdBitmap::storage_words(num_blocks), 64);
  o.data = round_up(o.live + 8 * words, alignment > page ? alignment : page);
  o.total = round_up(o.data + stride * num_blocks, page);
  return o;
}

}  // namespace unipool::kv_shared
