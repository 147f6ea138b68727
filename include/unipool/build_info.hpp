// unipool: what this build of the library contains.
#pragma once

namespace unipool {

struct BuildInfo {
  const char* version;        // "MAJOR.MINOR.PATCH"
  bool cuda;                  // built with the CUDA backends
  int cuda_runtime_version;   // e.g. 13000 for CUDA 13.0; 0 without CUDA
};

BuildInfo build_info() noexcept;

}  // namespace unipool
