list(APPEND UNIPOOL_SOURCES
  backend/build_info.cpp
  backend/device_backend.cpp)
list(APPEND UNIPOOL_CUDA_SOURCES
  backend/cuda/cuda_runtime_info.cpp)
