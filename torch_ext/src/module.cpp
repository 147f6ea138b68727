// unipool torch extension: the module unipool._C.
#include <torch/csrc/utils/pybind.h>

#include "kv_pool_type.hpp"
#include "unipool_torch.hpp"

namespace unipool::torch_ext {

void bind_host_tensors(py::module_& m);
void bind_kv_pool(py::module_& m);
void bind_shared_kv_pool(py::module_& m);
void bind_region_journal(py::module_& m);
void bind_cuda_allocator(py::module_& m);  // cuda_install.cpp or cuda_unavailable.cpp
// Test hooks, for unipool._testing only.
void bind_host_tensors_testing(py::module_& t);
void bind_host_allocator_testing(py::module_& t);
void bind_cuda_testing(py::module_& t);  // cuda_testing.cpp or cuda_unavailable.cpp

CudaHooks& cuda_hooks() {
  static CudaHooks hooks;
  return hooks;
}

void noop() {}

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
  bind_kv_pool(m);
  bind_shared_kv_pool(m);
  bind_region_journal(m);
  bind_cuda_allocator(m);
  // The test hooks fill unipool._testing when a test imports it; the
  // production module does not carry them.
  m.def("_bind_testing_hooks", [](py::module_ t) {
    bind_host_tensors_testing(t);
    bind_host_allocator_testing(t);
    bind_cuda_testing(t);
    t.def("noop", &noop, "an empty pybind11 call (benchmark reference)");
    if (!add_empty_methods_type(t.ptr())) throw py::error_already_set();
  });
}
