// unipool torch extension: the module unipool._C.
#include <torch/csrc/utils/pybind.h>

#include "kv_pool_type.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {

void bind_host_tensors(py::module_& m);
void bind_host_allocator(py::module_& m);
void bind_kv_pool(py::module_& m);
void bind_cuda_allocator(py::module_& m);  // cuda_install.cpp or cuda_unavailable.cpp

CudaHooks& cuda_hooks() {
  static CudaHooks hooks;
  return hooks;
}

StreamHandle stream_handle(c10::Stream stream) {
  if (cuda_hooks().stream_handle) return cuda_hooks().stream_handle(stream);
  return static_cast<StreamHandle>(stream.id());
}

}  // namespace unipool::torch_ext

PYBIND11_MODULE(_C, m) {
  using namespace unipool::torch_ext;
  m.doc() = "unipool: torch allocators over unipool's pools, host tensors, KV block pool";
  if (!add_kv_core_type(m.ptr())) throw py::error_already_set();
  bind_host_tensors(m);
  bind_host_allocator(m);
  bind_kv_pool(m);
  bind_cuda_allocator(m);
  m.def("_noop", [] {}, "an empty pybind11 call (benchmark reference)");
}
