// unipool backend/cuda: NCCL's allocation functions, found at run time so
// that libunipool loads (and its other backends work) without NCCL.
//
// Where NCCL comes from, first match wins:
//   1. $UNIPOOL_NCCL_LIBRARY, a path or soname: exactly that library, no fallback.
//   2. An NCCL already in the process (dlsym(RTLD_DEFAULT, "ncclMemAlloc")):
//      the application's own, e.g. the one its communicators use; in tests,
//      the null GPU's NCCL linked into the test binary.
//   3. dlopen("libnccl.so.2").
// A library opened here stays open for the life of the process.
#pragma once

// nccl.h pulls in cuda_fp8.hpp & co., which trip -Wconversion; the CUDA
// include directory is not a system one for unipool_cuda_objects.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <string>

namespace unipool::backend::cuda {

struct NcclLibrary {
  decltype(&::ncclMemAlloc) mem_alloc = nullptr;
  decltype(&::ncclMemFree) mem_free = nullptr;
  decltype(&::ncclGetErrorString) get_error_string = nullptr;

  std::string origin;       // where it was found, for messages
  std::string unavailable;  // empty when loaded; else why not

  bool available() const noexcept { return unavailable.empty(); }

  static NcclLibrary load();
};

}  // namespace unipool::backend::cuda
