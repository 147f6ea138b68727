list(APPEND UNIPOOL_SOURCES
  core/assert.cpp
  core/manual_fence.cpp
  core/range_allocator.cpp
  core/range_allocator_validate.cpp
  core/status.cpp)
