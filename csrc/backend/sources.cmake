list(APPEND UNIPOOL_SOURCES
  backend/build_info.cpp
  backend/device_backend.cpp
  backend/host_pinner.cpp)
list(APPEND UNIPOOL_CUDA_SOURCES
  backend/cuda/cuda_host_pinner.cpp
  backend/cuda/cuda_runtime_info.cpp
  backend/cuda/cuda_status.cpp)
