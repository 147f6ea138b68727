# Resolves UNIPOOL_CUDA (AUTO|ON|OFF) into UNIPOOL_HAS_CUDA.
# Only csrc/backend/ may use the result: nothing above it includes CUDA.
string(TOUPPER "${UNIPOOL_CUDA}" _unipool_cuda)
if(NOT _unipool_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "UNIPOOL_CUDA must be AUTO, ON or OFF (got '${UNIPOOL_CUDA}')")
endif()

set(UNIPOOL_HAS_CUDA OFF)
if(NOT _unipool_cuda STREQUAL "OFF")
  if(_unipool_cuda STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND)
    set(UNIPOOL_HAS_CUDA ON)
  endif()
endif()
message(STATUS "unipool: UNIPOOL_CUDA=${UNIPOOL_CUDA}, CUDA backends ${UNIPOOL_HAS_CUDA} ${CUDAToolkit_VERSION}")
