// bench/device: unipool's DevicePool as a peer, on whichever backend the
// build has (the null GPU's cuda_malloc / cuda_vmm, or the sim backend).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "peers.hpp"
#include "unipool/device_backend.hpp"

namespace device_bench {

// `backend_calls` counts the backend's memory calls since the peer was made,
// with the definition the other peers on that substrate use.
std::unique_ptr<Peer> make_unipool_peer(std::shared_ptr<unipool::DeviceBackend> backend, bool expandable,
                                        std::function<uint64_t()> backend_calls);

}  // namespace device_bench
