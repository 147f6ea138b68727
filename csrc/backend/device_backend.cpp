// unipool backend: the defaults of DeviceBackend's optional expandable calls.
#include "unipool/device_backend.hpp"

namespace unipool {

namespace {
BackendStatus unsupported() noexcept {
  return BackendStatus{BackendStatus::error, 0, "expandable segments are not supported by this backend"};
}
}  // namespace

BackendStatus DeviceBackend::reserve(int, uint64_t, void**) { return unsupported(); }
BackendStatus DeviceBackend::map(int, void*, uint64_t, uint64_t) { return unsupported(); }
BackendStatus DeviceBackend::unmap(int, void*, uint64_t, uint64_t) { return unsupported(); }
BackendStatus DeviceBackend::unreserve(int, void*, uint64_t) { return unsupported(); }

}  // namespace unipool
