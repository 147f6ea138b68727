// bench/device: PyTorch's CUDACachingAllocator (c10::cuda, as shipped in the
// installed torch) as a peer. Built only when CMake found torch's c10 and
// the shared null GPU that libc10_cuda's libcudart.so.13 resolves to.
#pragma once

#include <memory>
#include <string>

#include "peers.hpp"

namespace device_bench {

// The allocator is a process singleton: each peer switches its settings
// (expandable_segments:True/False), empties its cache and resets its stats,
// and empties the cache again when destroyed. One peer at a time.
std::unique_ptr<Peer> make_torch_peer(bool expandable);
// "CUDACachingAllocator of torch 2.x", with the setting.
std::string torch_substrate(bool expandable);

}  // namespace device_bench
