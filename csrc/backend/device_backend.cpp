// unipool backend: the defaults of DeviceBackend's optional calls.
#include "unipool/device_backend.hpp"

namespace unipool {

namespace {
BackendStatus unsupported() noexcept {
  return BackendStatus{BackendStatus::error, 0, "expandable segments are not supported by this backend"};
}
BackendStatus no_ipc() noexcept {
  return BackendStatus{BackendStatus::error, 0, "this backend cannot share memory with other processes (CUDA IPC)"};
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
BackendStatus DeviceBackend::ipc_export(int, void*, uint64_t, uint64_t, IpcHandle*) { return no_ipc(); }
BackendStatus DeviceBackend::ipc_open(int, const IpcHandle&, void**) { return no_ipc(); }
BackendStatus DeviceBackend::ipc_close(int, void*) { return no_ipc(); }
BackendStatus DeviceBackend::copy(int, const DeviceCopy*, size_t, CopyDirection) { return no_copies(); }

}  // namespace unipool
