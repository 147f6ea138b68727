list(APPEND UNIPOOL_SOURCES
  backend/build_info.cpp
  backend/device_backend.cpp
  backend/host_pinner.cpp
  backend/os/descriptor_server.cpp
  backend/os/unix_socket.cpp
  backend/pin_pieces.cpp)
list(APPEND UNIPOOL_CUDA_SOURCES
  backend/cuda/cuda_backend_base.cpp
  backend/cuda/cuda_backends.cpp
  backend/cuda/cuda_driver_api.cpp
  backend/cuda/cuda_event_fences.cpp
  backend/cuda/cuda_host_pinner.cpp
  backend/cuda/cuda_malloc_backend.cpp
  backend/cuda/cuda_runtime_info.cpp
  backend/cuda/cuda_status.cpp
  backend/cuda/cuda_vmm_backend.cpp
  backend/cuda/cuda_vmm_ipc.cpp
  backend/cuda/device_guard.cpp
  backend/cuda/nccl_backend.cpp
  backend/cuda/nccl_library.cpp)
