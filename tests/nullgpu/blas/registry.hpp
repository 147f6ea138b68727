// unipool null GPU, cuBLAS: the live objects of both BLAS stand-ins.
//
// libcublasLt.so.13 owns this registry and libcublas.so.13 links it, as the
// real libcublas links libcublasLt: torch hands a cuBLAS handle to cuBLASLt
// calls (a cublasHandle_t is a valid cublasLtHandle_t), so both libraries
// must recognise the same handles. Every object is checked against the live
// set before use, so a destroyed or foreign handle is an error, not UB.
#pragma once

#include <cstddef>
#include <cstdint>

namespace unipool::nullgpu::blas {

// What a cuBLAS handle remembers: what torch sets and reads back.
struct HandleState {
  void* stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int math_mode = 0;     // CUBLAS_DEFAULT_MATH
  int pointer_mode = 0;  // CUBLAS_POINTER_MODE_HOST
  int atomics_mode = 0;  // CUBLAS_ATOMICS_NOT_ALLOWED
  int sm_count_target = 0;
};

// The kinds of cuBLASLt descriptor; each has its own live set.
enum class LtKind { matmul_desc, matrix_layout, preference };

extern "C" {
// A new handle, or null when out of memory.
void* unipool_nullgpu_blas_create_handle() noexcept;
// False if `handle` is not live.
bool unipool_nullgpu_blas_destroy_handle(void* handle) noexcept;
// Runs `update` on the handle's state under the registry's lock; false if
// `handle` is not live.
bool unipool_nullgpu_blas_with_handle(void* handle, void (*update)(HandleState&, void*), void* arg) noexcept;
bool unipool_nullgpu_blas_handle_live(void* handle) noexcept;
// cublasCreate / cublasLtCreate and their Destroy, as cuBLAS statuses:
// invalid value for a null `out`, alloc failed, not initialized for a
// handle that is not live.
int unipool_nullgpu_blas_create_status(void** out) noexcept;
int unipool_nullgpu_blas_destroy_status(void* handle) noexcept;

// cuBLASLt descriptors: attributes stored as bytes, by attribute id.
void* unipool_nullgpu_blas_create_lt(LtKind kind) noexcept;
bool unipool_nullgpu_blas_destroy_lt(LtKind kind, void* object) noexcept;
bool unipool_nullgpu_blas_lt_live(LtKind kind, const void* object) noexcept;
bool unipool_nullgpu_blas_lt_set(LtKind kind, void* object, int attribute, const void* data, size_t bytes) noexcept;
// The same as a cuBLAS status: invalid value for a dead object, or for no
// data with a size.
int unipool_nullgpu_blas_lt_set_status(LtKind kind, void* object, int attribute, const void* data,
                                       size_t bytes) noexcept;
// Copies the attribute into `data` (zeros if never set) and its size into
// `*written`; with `bytes` 0 only reports the size. False if not live.
bool unipool_nullgpu_blas_lt_get(LtKind kind, const void* object, int attribute, void* data, size_t bytes,
                                 size_t* written) noexcept;
int unipool_nullgpu_blas_lt_get_status(LtKind kind, const void* object, int attribute, void* data, size_t bytes,
                                       size_t* written) noexcept;

// Compute calls (GEMMs, level 1-3) accepted so far: they compute nothing,
// tests read this to see that work reached the stand-in.
void unipool_nullgpu_blas_count_compute() noexcept;
uint64_t unipool_nullgpu_blas_compute_calls() noexcept;
}

}  // namespace unipool::nullgpu::blas
