// unipool null GPU, cuBLAS: the helpers that move vectors and matrices
// between host and device. Like every null GPU copy they move the real
// bytes (through the runtime stand-in's cudaMemcpy2D, which checks that the
// device side is allocated), so a round trip's contents can be checked.
#include <cublas_v2.h>

namespace {

// Copies `height` rows of `width` bytes between pitched buffers on `stream`
// (synchronous when `sync`): what every helper below reduces to.
cublasStatus_t copy(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaStream_t stream, bool sync) {
  if (width == 0 || height == 0) return CUBLAS_STATUS_SUCCESS;
  const cudaError_t e = sync ? cudaMemcpy2D(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault)
                             : cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, stream);
  if (e == cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  (void)cudaGetLastError();  // cuBLAS reports its own status, not a pending runtime error
  return CUBLAS_STATUS_MAPPING_ERROR;
}

// n elements of elem_size bytes, every inc_src-th to every inc_dst-th.
cublasStatus_t copy_vector(int n, int elem_size, const void* src, int inc_src, void* dst, int inc_dst,
                           cudaStream_t stream, bool sync) {
  if (n < 0 || elem_size <= 0 || inc_src <= 0 || inc_dst <= 0 || src == nullptr || dst == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t e = static_cast<size_t>(elem_size);
  return copy(dst, e * static_cast<size_t>(inc_dst), src, e * static_cast<size_t>(inc_src), e,
              static_cast<size_t>(n), stream, sync);
}

// A rows x cols column-major matrix with leading dimensions ld_src, ld_dst.
cublasStatus_t copy_matrix(int rows, int cols, int elem_size, const void* src, int ld_src, void* dst, int ld_dst,
                           cudaStream_t stream, bool sync) {
  if (rows < 0 || cols < 0 || elem_size <= 0 || ld_src <= 0 || ld_dst <= 0 || ld_src < rows || ld_dst < rows ||
      src == nullptr || dst == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t e = static_cast<size_t>(elem_size);
  return copy(dst, e * static_cast<size_t>(ld_dst), src, e * static_cast<size_t>(ld_src),
              e * static_cast<size_t>(rows), static_cast<size_t>(cols), stream, sync);
}

}  // namespace

extern "C" {

cublasStatus_t cublasSetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return copy_vector(n, elemSize, x, incx, y, incy, nullptr, true);
}
cublasStatus_t cublasGetVector(int n, int elemSize, const void* x, int incx, void* y, int incy) {
  return copy_vector(n, elemSize, x, incx, y, incy, nullptr, true);
}
cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
  return copy_vector(n, elemSize, x, incx, y, incy, stream, false);
}
cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
  return copy_vector(n, elemSize, x, incx, y, incy, stream, false);
}
cublasStatus_t cublasSetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb) {
  return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, nullptr, true);
}
cublasStatus_t cublasGetMatrix(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb) {
  return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, nullptr, true);
}
cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb,
                                    cudaStream_t stream) {
  return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, stream, false);
}
cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void* A, int lda, void* B, int ldb,
                                    cudaStream_t stream) {
  return copy_matrix(rows, cols, elemSize, A, lda, B, ldb, stream, false);
}

}  // extern "C"
