// unipool torch extension: the memory the pools map, queued for Python
// (unipool.nixl's HostAgent and DeviceAgent, which register it with NIXL).
//
// The pools' hooks run where memory is mapped: the host pool's with its
// locks held or on its pinning thread, the device pools' on any thread
// torch allocates from. Calling into Python there could wait for the GIL
// while its holder waits for the pool. So the hooks only queue, under the
// journal's own lock, and Python applies the queue when it next looks a
// block up (drain).
#pragma once

#include "unipool/device_pool.hpp"

namespace unipool::torch_ext {

// The hooks every device pool of the CUDA allocator (default and private)
// gets at creation. They keep the book of the mapped ranges, which a
// DeviceAgent attached later is told first, then follow as they change.
DeviceSegmentHooks device_region_hooks();

}  // namespace unipool::torch_ext
