// unipool null GPU: every CUDA driver function the null GPU does not
// implement, as a loud stub (unimplemented.hpp), and their table for
// cuGetProcAddress. No CUDA header here.
#include <cstring>

#include "nullgpu/unimplemented.hpp"

// CUDA_ERROR_NOT_SUPPORTED; the header cannot be included beside the stubs.
constexpr int kNotSupported = 801;

#define UNIPOOL_NULLGPU_STUB(name) UNIPOOL_NULLGPU_UNIMPLEMENTED(name, kNotSupported)
#include "nullgpu/cuda_unimplemented.def"
#undef UNIPOOL_NULLGPU_STUB

namespace unipool::nullgpu::detail {
namespace {
struct Stub {
  const char* name;
  int (*function)();
};
#define UNIPOOL_NULLGPU_STUB(name) {#name, &::name},
const Stub kStubs[] = {
#include "nullgpu/cuda_unimplemented.def"
};
#undef UNIPOOL_NULLGPU_STUB
}  // namespace

void* unimplemented_driver_symbol(const char* name) {
  for (const Stub& stub : kStubs) {
    if (std::strcmp(stub.name, name) == 0) return reinterpret_cast<void*>(stub.function);
  }
  return nullptr;
}

}  // namespace unipool::nullgpu::detail
