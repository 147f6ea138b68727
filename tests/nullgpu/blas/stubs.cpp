// unipool null GPU, cuBLAS and cuBLASLt: every function of the real
// libraries the stand-ins do not implement, as a loud stub
// (../unimplemented.hpp). Compiled once per library with the list of that
// library (UNIPOOL_NULLGPU_BLAS_STUBS names the .def file). No cuBLAS
// header here.
#include "nullgpu/unimplemented.hpp"

// CUBLAS_STATUS_NOT_SUPPORTED; the header cannot be included beside the stubs.
constexpr int kNotSupported = 15;

#define UNIPOOL_NULLGPU_STUB(name) UNIPOOL_NULLGPU_UNIMPLEMENTED(name, kNotSupported)
#include UNIPOOL_NULLGPU_BLAS_STUBS
