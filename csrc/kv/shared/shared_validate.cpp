// unipool kv shared: SharedKVBlockPool::validate(), every invariant of the
// shared books, for tests.
#include <string>

#include "kv/shared/shared_state.hpp"

namespace unipool {
namespace {

namespace owner = kv_shared::owner;
using kv_shared::Counters;
using kv_shared::Header;

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

std::string block(uint64_t id) { return "block " + std::to_string(id); }

// Each owner word names attached members and agrees with both bitmaps;
// counts what it finds into c.
bool owners_agree(const SharedKVBlockPool::Local& l, Counters& c, std::string* why) {
  const Header& h = *l.header;
  auto attached = [&](uint32_t m) {
    return m < h.max_members && h.members[m].state == kv_shared::MemberState::attached;
  };
  for (uint64_t id = 0; id < h.num_blocks; ++id) {
    const uint32_t w = l.owners[id];
    const bool free_bit = l.index.free.test(id), live_bit = (l.index.live[id / 64] >> (id % 64)) & 1;
    if (w & ~uint32_t{0x1ffff}) return fail(why, block(id) + " has a malformed owner word");
    if (owner::is_free(w)) {
      if (!free_bit || live_bit) return fail(why, block(id) + " is free but the bitmaps disagree");
      if (w != owner::kFree) return fail(why, block(id) + " is free with bits set");
      continue;
    }
    if (!attached(owner::member(w)))
      return fail(why,
                  block(id) + " is owned by member " + std::to_string(owner::member(w)) + ", which is not attached");
    if (owner::in_transit(w) && (!attached(owner::receiver(w)) || owner::is_deferred(w))) {
      return fail(why, block(id) + " is handed to a member that is not attached, or while deferred");
    }
    if (free_bit || live_bit == owner::is_deferred(w))
      return fail(why, block(id) + " is owned but the bitmaps disagree");
    c.live += !owner::is_deferred(w);
    c.deferred += owner::is_deferred(w);
  }
  return true;
}

bool bits_past_end_clear(const SharedKVBlockPool::Local& l, std::string* why) {
  const uint64_t n = l.header->num_blocks, last = (n - 1) / 64;
  const uint64_t tail = n % 64 ? ~((uint64_t{1} << (n % 64)) - 1) : 0;
  if ((l.index.free.word(last) | l.index.live[last]) & tail) return fail(why, "a bit past the last block is set");
  return true;
}

// This process's deferred batches hold exactly its deferred blocks.
bool batches_agree(const SharedKVBlockPool::Local& l, std::string* why) {
  uint64_t in_batches = 0, mine = 0;
  for (const SharedKVBlockPool::Local::Batch& b : l.batches) {
    for (uint32_t id : b.ids) {
      if (id >= l.header->num_blocks || l.owners[id] != (owner::live(l.member) | owner::kDeferred)) {
        return fail(why, "a deferred batch holds " + block(id) + ", which is not this member's deferred block");
      }
    }
    in_batches += b.ids.size();
  }
  for (uint64_t id = 0; id < l.header->num_blocks; ++id)
    mine += l.owners[id] == (owner::live(l.member) | owner::kDeferred);
  if (mine != in_batches) return fail(why, "this member's deferred blocks and its batches differ in number");
  return true;
}

}  // namespace

bool SharedKVBlockPool::validate(std::string* why) const {
  const Local& l = *local_;
  const Header& h = *l.header;
  kv_shared::Lock lock(*local_);
  if (h.journal.state.load(std::memory_order_acquire) != kv_shared::JournalState::idle || h.journal.num_groups) {
    return fail(why, "a journal entry is open outside a call");
  }
  if (l.member >= h.max_members || h.members[l.member].state != kv_shared::MemberState::attached) {
    return fail(why, "this process is not an attached member");
  }
  Counters found;
  if (!owners_agree(l, found, why) || !bits_past_end_clear(l, why) || !kv_summaries_agree(l.index.free, why))
    return false;
  const Counters& c = h.counters;
  if (found.live != c.live || found.deferred != c.deferred) {
    return fail(why, "counts (live " + std::to_string(c.live) + ", deferred " + std::to_string(c.deferred) +
                         ") disagree with the owners (" + std::to_string(found.live) + ", " +
                         std::to_string(found.deferred) + ")");
  }
  if (l.index.free.count() + c.live + c.deferred != h.num_blocks) return fail(why, "block counts do not add up");
  if (c.allocs != c.frees + c.reclaimed + c.live + c.deferred)
    return fail(why, "allocs != frees + reclaimed + live + deferred");
  if (c.peak_live < c.live) return fail(why, "peak below current");
  return batches_agree(l, why);
}

}  // namespace unipool
