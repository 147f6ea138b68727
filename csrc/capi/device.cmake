list(APPEND UNIPOOL_SOURCES capi/device_capi.cpp)
