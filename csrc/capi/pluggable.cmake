list(APPEND UNIPOOL_SOURCES capi/pluggable.cpp)
