# The C ABI, one part per pool: capi/device.cmake, capi/host.cmake, capi/kv.cmake.
foreach(part device host kv pluggable)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
    include(${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
  endif()
endforeach()
list(APPEND UNIPOOL_SOURCES capi/common_capi.cpp)
