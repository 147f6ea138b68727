list(APPEND UNIPOOL_SOURCES capi/host_capi.cpp)
