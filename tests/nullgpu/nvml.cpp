// unipool null GPU: the few NVML calls torch makes (libnvidia-ml.so.1).
//
// torch opens NVML with dlopen when its allocator maps expandable segments
// (to ask whether the device has fabric memory), when it reports the
// processes of an out-of-memory device, and for peer access over NVLink.
// Without a libnvidia-ml.so.1 torch calls a null function pointer. The
// null GPU answers as a single PCIe device without fabric or NVLink does:
// the device is found by its bus id, and fabric, NVLink and per-process
// queries are "not supported". Every other NVML function is absent, so
// torch's lookup of it fails instead of succeeding silently.
//
// NVML's header is not part of the CUDA toolkit here: the few types are
// declared with the values of NVML's ABI.
#include <cuda.h>

#include <cstdio>
#include <cstring>

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNotFound = 6;

// nvmlGpuFabricInfoV_t, as NVML lays it out.
struct FabricInfo {
  unsigned version;
  unsigned char cluster_uuid[16];
  nvmlReturn_t status;
  unsigned clique_id;
  unsigned char state;
  unsigned health_mask;
};
constexpr unsigned char kFabricStateNotSupported = 0;

// A device handle is the address of one of these; NVML's is opaque too.
struct NvmlDevice {
  int ordinal;
};
constexpr int kMaxDevices = 64;
NvmlDevice g_devices[kMaxDevices];
bool g_initialized = false;

int device_count() {
  int n = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
  return n < kMaxDevices ? n : kMaxDevices;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  for (int i = 0; i < kMaxDevices; ++i) g_devices[i].ordinal = i;
  g_initialized = true;
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  if (!g_initialized) return kUninitialized;
  g_initialized = false;
  return kSuccess;
}

// The bus ids are those cudaDeviceGetPCIBusId gives: "00000000:<device + 1>:00.0".
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id,
                                                                                       NvmlDevice** device) {
  if (!g_initialized) return kUninitialized;
  if (bus_id == nullptr || device == nullptr) return kInvalidArgument;
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) return kInvalidArgument;
  const int ordinal = static_cast<int>(bus) - 1;
  if (domain != 0 || slot != 0 || function != 0 || ordinal < 0 || ordinal >= device_count()) return kNotFound;
  *device = &g_devices[ordinal];
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == nullptr) return kInvalidArgument;
  return cuDriverGetVersion(version) == CUDA_SUCCESS ? kSuccess : kUninitialized;
}

// No fabric memory: answered as a device outside any NVLink fabric is
// (success, fabric state "not supported"), so torch does not warn.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(NvmlDevice* device,
                                                                                  FabricInfo* info) {
  if (!g_initialized) return kUninitialized;
  if (device == nullptr || info == nullptr) return kInvalidArgument;
  const unsigned version = info->version;
  std::memset(info, 0, sizeof *info);
  info->version = version;
  info->status = kNotSupported;
  info->state = kFabricStateNotSupported;
  return kSuccess;
}

// No NVLink, no per-process accounting on the null GPU.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(NvmlDevice*, unsigned, int*) {
  return g_initialized ? kNotSupported : kUninitialized;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(NvmlDevice*, unsigned, void*) {
  return g_initialized ? kNotSupported : kUninitialized;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(NvmlDevice*, unsigned*,
                                                                                           void*) {
  return g_initialized ? kNotSupported : kUninitialized;
}

}  // extern "C"
