// unipool null GPU, cuBLASLt: handles (the same registry as cuBLAS, since
// torch passes a cuBLAS handle to cuBLASLt), descriptors that keep their
// attributes, a heuristic that offers one algorithm needing no workspace,
// and a matmul that checks what it is given and computes nothing.
#include <cublasLt.h>
#include <cublas_api.h>

#include <cstring>

#include "registry.hpp"

namespace blas = unipool::nullgpu::blas;
using blas::LtKind;

namespace {

cublasStatus_t status(bool ok) { return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE; }

// Creates an object of `kind` into *out and stores `n` initial attributes.
template <class T>
cublasStatus_t create(T* out, LtKind kind, std::initializer_list<std::pair<int, uint64_t>> attributes = {},
                      std::initializer_list<size_t> sizes = {}) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  void* object = blas::unipool_nullgpu_blas_create_lt(kind);
  if (object == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  auto size = sizes.begin();
  for (const auto& [attribute, value] : attributes) {
    blas::unipool_nullgpu_blas_lt_set(kind, object, attribute, &value, *size++);
  }
  *out = static_cast<T>(object);
  return CUBLAS_STATUS_SUCCESS;
}

bool live(LtKind kind, const void* object) { return blas::unipool_nullgpu_blas_lt_live(kind, object); }

cublasStatus_t set(LtKind kind, void* object, int attribute, const void* buf, size_t bytes) {
  return static_cast<cublasStatus_t>(blas::unipool_nullgpu_blas_lt_set_status(kind, object, attribute, buf, bytes));
}

cublasStatus_t get(LtKind kind, const void* object, int attribute, void* buf, size_t bytes, size_t* written) {
  return static_cast<cublasStatus_t>(
      blas::unipool_nullgpu_blas_lt_get_status(kind, object, attribute, buf, bytes, written));
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  return static_cast<cublasStatus_t>(blas::unipool_nullgpu_blas_create_status(reinterpret_cast<void**>(handle)));
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return static_cast<cublasStatus_t>(blas::unipool_nullgpu_blas_destroy_status(handle));
}

size_t cublasLtGetVersion() { return CUBLAS_VERSION; }
size_t cublasLtGetCudartVersion() { return CUDART_VERSION; }

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

const char* cublasLtGetStatusName(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_ERROR (unipool null GPU)";
}
const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }

// ---- descriptors ------------------------------------------------------------

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  return create(desc, LtKind::matmul_desc,
                {{CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute}, {CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale}},
                {sizeof(int32_t), sizeof(int32_t)});
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return status(blas::unipool_nullgpu_blas_destroy_lt(LtKind::matmul_desc, desc));
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  return set(LtKind::matmul_desc, desc, attr, buf, bytes);
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t bytes, size_t* written) {
  return get(LtKind::matmul_desc, desc, attr, buf, bytes, written);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  return create(layout, LtKind::matrix_layout,
                {{CUBLASLT_MATRIX_LAYOUT_TYPE, type},
                 {CUBLASLT_MATRIX_LAYOUT_ROWS, rows},
                 {CUBLASLT_MATRIX_LAYOUT_COLS, cols},
                 {CUBLASLT_MATRIX_LAYOUT_LD, static_cast<uint64_t>(ld)}},
                {sizeof(uint32_t), sizeof(uint64_t), sizeof(uint64_t), sizeof(int64_t)});
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return status(blas::unipool_nullgpu_blas_destroy_lt(LtKind::matrix_layout, layout));
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  return set(LtKind::matrix_layout, layout, attr, buf, bytes);
}
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t bytes, size_t* written) {
  return get(LtKind::matrix_layout, layout, attr, buf, bytes, written);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return create(pref, LtKind::preference);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return status(blas::unipool_nullgpu_blas_destroy_lt(LtKind::preference, pref));
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  return set(LtKind::preference, pref, attr, buf, bytes);
}
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t bytes, size_t* written) {
  return get(LtKind::preference, pref, attr, buf, bytes, written);
}

// ---- matmul -------------------------------------------------------------------

// One algorithm, no workspace: the null GPU computes nothing, so any
// algorithm is as good as another, and asking for none keeps the caller's
// workspace out of the picture.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!blas::unipool_nullgpu_blas_handle_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || results == nullptr || returned == nullptr || !live(LtKind::matmul_desc, op) ||
      !live(LtKind::matrix_layout, a) || !live(LtKind::matrix_layout, b) || !live(LtKind::matrix_layout, c) ||
      !live(LtKind::matrix_layout, d) || !live(LtKind::preference, pref)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t*, void* workspace, size_t workspace_bytes, cudaStream_t) {
  if (!blas::unipool_nullgpu_blas_handle_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool operands = A != nullptr && B != nullptr && D != nullptr && alpha != nullptr && beta != nullptr &&
                        (C != nullptr || D != nullptr);
  if (!operands || (workspace_bytes != 0 && workspace == nullptr) || !live(LtKind::matmul_desc, op) ||
      !live(LtKind::matrix_layout, a) || !live(LtKind::matrix_layout, b) || !live(LtKind::matrix_layout, c) ||
      !live(LtKind::matrix_layout, d)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  blas::unipool_nullgpu_blas_count_compute();
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
