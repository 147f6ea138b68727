// unipool backend/cuda: the CUDA host pinner (cudaHostRegister). A plain C++
// header, so backend/host_pinner.cpp can name it without CUDA headers.
#pragma once

#include <memory>

#include "backend/host_pinner.hpp"

namespace unipool::backend {

std::unique_ptr<HostPinner> make_cuda_host_pinner();

}  // namespace unipool::backend
