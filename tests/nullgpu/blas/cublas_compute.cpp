// unipool null GPU, cuBLAS: the compute calls torch makes (GEMMs, GEMVs,
// level-1 and the batched solvers' building blocks). Like kernels on the
// null GPU they succeed and write nothing; each checks its handle (every
// one of them takes the handle first), so a call on a destroyed handle
// still fails as cuBLAS would. The list is compute.def, generated from
// torch's imports by ../update_stub_lists.sh. No cuBLAS header here: the
// functions are declared without their arguments (unimplemented.hpp says
// why that is sound).
#include "registry.hpp"

namespace {
constexpr int kSuccess = 0;         // CUBLAS_STATUS_SUCCESS
constexpr int kNotInitialized = 1;  // CUBLAS_STATUS_NOT_INITIALIZED

int accept(void* handle) {
  namespace blas = unipool::nullgpu::blas;
  if (!blas::unipool_nullgpu_blas_handle_live(handle)) return kNotInitialized;
  blas::unipool_nullgpu_blas_count_compute();
  return kSuccess;
}
}  // namespace

#define UNIPOOL_NULLGPU_BLAS_COMPUTE(name) \
  extern "C" __attribute__((visibility("default"))) int name(void* handle) { return accept(handle); }
#include "compute.def"
