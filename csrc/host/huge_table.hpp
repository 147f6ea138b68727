// unipool host: the records of huge blocks and deferred frees.
#pragma once

#include <cstdint>

#include "host/ptr_table.hpp"
#include "unipool/fence.hpp"

namespace unipool::host {

struct HugeEntry {
  uintptr_t ptr = 0;        // the block's address (the mapping's start)
  uint64_t map_bytes = 0;
  uint64_t requested = 0;
  bool pinned = false;
  bool pin_failed = false;  // best_effort: registration failed, served pageable
  bool internal = false;    // the engine's own allocation (see t_internal)
};
using HugeTable = PtrTable<HugeEntry>;

struct DeferredEntry {
  uintptr_t ptr = 0;
  FenceSource* source = nullptr;
  FenceId fence = kNoFence;
  uint64_t bytes = 0;       // the block's footprint
  uint64_t requested = 0;   // what its user asked for (stats count it as freed)
};
using DeferredTable = PtrTable<DeferredEntry>;

}  // namespace unipool::host
