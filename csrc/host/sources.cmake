# The host pool (csrc/host/) and its OS memory source (csrc/backend/os/).
list(APPEND UNIPOOL_SOURCES
  backend/os/os_memory.cpp
  host/arena.cpp
  host/arena_ahead.cpp
  host/config.cpp
  host/deferred_frees.cpp
  host/engine.cpp
  host/engine_corruption.cpp
  host/engine_deferred.cpp
  host/engine_huge.cpp
  host/engine_large.cpp
  host/engine_large_cache.cpp
  host/engine_pages.cpp
  host/engine_pin_thread.cpp
  host/engine_cache.cpp
  host/engine_small.cpp
  host/engine_stats.cpp
  host/engine_validate.cpp
  host/errors.cpp
  host/huge_blocks.cpp
  host/history.cpp
  host/host_pool.cpp
  host/pin_thread.cpp
  host/segment_store.cpp
  host/thread_state.cpp)
