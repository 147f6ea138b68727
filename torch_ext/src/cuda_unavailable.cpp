// unipool torch extension built without CUDA (a CPU-only torch, or an engine
// built with UNIPOOL_CUDA=OFF): install() registers only the pinned host
// allocator, which torch never calls without CUDA; the CUDA route says why
// it is missing.
#include <torch/csrc/utils/pybind.h>

#include "unipool_torch.hpp"

namespace unipool::torch_ext {

void bind_cuda_allocator(py::module_& m) {
  m.attr("_has_cuda_allocator") = false;
  m.def("install", [](const std::string& device_conf, const std::string& host_conf) {
    if (!host_conf.empty()) configure_host_pool(host_conf);
    TORCH_CHECK(device_conf.empty(), "unipool: the CUDA allocator is not built (torch without CUDA, or "
                "unipool built with UNIPOOL_CUDA=OFF); device_conf cannot be used");
    register_host_allocator();
  }, py::arg("device_conf") = "", py::arg("host_conf") = "");
  m.def("installed", [] { return host_allocator_registered(); });
}

void bind_cuda_testing(py::module_&) {}

}  // namespace unipool::torch_ext
