// unipool host: reporting a free block that was written after it was freed.
//
// The checks are in free_link.hpp; the paths that pop or collect blocks call
// report_corruption() when one fails and then drop the block with the rest
// of its list. Dropped blocks are never handed out again (the program that
// wrote into one may still hold it); the page keeps counting a dropped
// remote block as used and a dropped local one as free but unlisted, so it
// is leaked, not reused, until the page empties and is formatted anew.
#include "host/engine.hpp"

namespace unipool::host {

void Engine::report_corruption(const Page* page, const Block* block, bool double_free) const noexcept {
  Message what;
  if (double_free) {
    what.add("heap corruption: the block at ")
        .add_ptr(block)
        .add(" was freed twice (a ")
        .add_dec(page->block_size)
        .add("-byte block; the second free came from another thread while it was free)");
  } else {
    what.add("heap corruption: the free block at ")
        .add_ptr(block)
        .add(" was written after it was freed (a ")
        .add_dec(page->block_size)
        .add("-byte block; its free-list link or cookie was overwritten)");
  }
  report_corruption(what);
}

void Engine::report_large_corruption(const void* block) const noexcept {
  report_corruption(Message{}
                        .add("heap corruption: the header of the large block at ")
                        .add_ptr(block)
                        .add(", free in a thread's large cache, was overwritten (it is left unused)"));
}

void Engine::report_corruption(const Message& what) const noexcept {
  if (counters_.corruption.fetch_add(1, std::memory_order_relaxed) == 0) first_corruption_ = what;
  fail(Status::corrupted, Message{}.add("unipool host pool: ").add(what.c_str()));
  if (CorruptionHandler handler = corruption_handler()) handler(what.c_str());
}

}  // namespace unipool::host
