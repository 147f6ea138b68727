list(APPEND UNIPOOL_SOURCES capi/kv_capi.cpp)
