// unipool host: where a pool gets its pinner. The default is the backend's
// (CUDA when built with it); tests install one with injected failures.
#pragma once

#include <memory>

#include "backend/host_pinner.hpp"

namespace unipool::host {

using PinnerFactory = std::unique_ptr<backend::HostPinner> (*)();

// Pools created after this call use `factory` (nullptr: the default again).
void set_pinner_factory(PinnerFactory factory) noexcept;
std::unique_ptr<backend::HostPinner> make_pinner();

}  // namespace unipool::host
