# The device pool (csrc/device/) and the simulated device backend it is tested
# on (csrc/backend/sim/, plain C++: listed here so the backend layer's own
# list holds only the CUDA backends).
list(APPEND UNIPOOL_SOURCES
  backend/sim/sim_backend.cpp
  device/backend_factory.cpp
  device/config.cpp
  device/device_pool.cpp
  device/device_pools.cpp
  device/oom_report.cpp
  device/pool_allocate.cpp
  device/pool_checkpoint.cpp
  device/pool_free.cpp
  device/pool_ipc.cpp
  device/pool_growth.cpp
  device/pool_release.cpp
  device/pool_sleep.cpp
  device/pool_snapshot.cpp
  device/pool_trace.cpp
  device/pool_validate.cpp
  device/pool_wake.cpp
  device/snapshot_json.cpp
  device/stats.cpp
  device/tags.cpp)

# The factory names the CUDA backends once backend/cuda lists them.
if(UNIPOOL_HAS_CUDA AND "backend/cuda/cuda_backends.cpp" IN_LIST UNIPOOL_CUDA_SOURCES)
  set_source_files_properties(device/backend_factory.cpp PROPERTIES
    COMPILE_DEFINITIONS UNIPOOL_DEVICE_CUDA_BACKENDS=1)
endif()
