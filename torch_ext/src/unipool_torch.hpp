// unipool torch extension: what its parts share. Host-only: no CUDA header
// here; the CUDA allocator (cuda_allocator.cpp, cuda_install.cpp) fills the
// CUDA hooks when torch and the engine were both built with CUDA.
#pragma once

#include <c10/core/Stream.h>

#include <string>

#include "unipool/fence.hpp"
#include "unipool/host_pool.hpp"

namespace unipool::torch_ext {

// The host pool behind unipool.empty() and the pinned host allocator: the one
// configured by install(host_conf=...) / configure_host(), else the default
// pool (UNIPOOL_HOST_CONF).
HostPool& host_pool();
// Makes the host pool from `conf`; an error once the pool is in use.
void configure_host_pool(const std::string& conf);
// What configure_host_pool() would refuse, refused without applying anything.
void check_host_pool_config(const std::string& conf);

// CUDA hooks. Without CUDA: no fences (copies are synchronous) and a stream's
// id stands for its handle.
struct CudaHooks {
  // Fences on CUDA streams for deferred host frees; nullptr when none.
  FenceSource* (*fences)() = nullptr;
  // The cudaStream_t value of a torch stream (the sim backend: its id).
  StreamHandle (*stream_handle)(c10::Stream stream) = nullptr;
};
CudaHooks& cuda_hooks();
StreamHandle stream_handle(c10::Stream stream);

// The pinned host allocator (host_allocator.cpp).
void register_host_allocator();
bool host_allocator_registered();
}  // namespace unipool::torch_ext
