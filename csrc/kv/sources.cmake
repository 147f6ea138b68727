# The KV-cache offload block pool (include/unipool/kv_block_pool.hpp): an
# arena from backend/os, pinned through backend's host pinner.
list(APPEND UNIPOOL_SOURCES
  kv/kv_arena.cpp
  kv/kv_block_pool.cpp
  kv/kv_pinning.cpp
  kv/kv_simd.cpp
  kv/kv_validate.cpp)
