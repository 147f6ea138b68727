// unipool backend: the defaults of DeviceBackend's optional calls.
#include "unipool/device_backend.hpp"

namespace unipool {

namespace {
BackendStatus unsupported() noexcept {
  return BackendStatus{BackendStatus::error, 0, "expandable segments are not supported by this backend"};
}
BackendStatus no_copies() noexcept {
  return BackendStatus{BackendStatus::error, 0, "this backend cannot copy between device and host memory"};
}
}  // namespace

BackendStatus DeviceBackend::reserve(int, uint64_t, void**) { return unsupported(); }
BackendStatus DeviceBackend::map(int, void*, uint64_t, uint64_t) { return unsupported(); }
BackendStatus DeviceBackend::unmap(int, void*, uint64_t, uint64_t) { return unsupported(); }
BackendStatus DeviceBackend::unreserve(int, void*, uint64_t) { return unsupported(); }
BackendStatus DeviceBackend::synchronize(int) { return BackendStatus::success(); }
BackendStatus DeviceBackend::copy(int, const DeviceCopy*, size_t, CopyDirection) { return no_copies(); }

}  // namespace unipool
