// unipool backend: facts about the CUDA runtime linked in. Only compiled
// when the library is built with CUDA (UNIPOOL_HAS_CUDA).
#pragma once

namespace unipool::backend {

// cudaRuntimeGetVersion(); needs no GPU. 0 if the call fails.
int cuda_runtime_version() noexcept;

}  // namespace unipool::backend
