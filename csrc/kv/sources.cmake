# The KV-cache offload block pool (include/unipool/kv_block_pool.hpp): an
# arena from backend/os, pinned through backend's host pinner.
list(APPEND UNIPOOL_SOURCES
  kv/kv_arena.cpp
  kv/kv_block_pool.cpp
  kv/kv_pinning.cpp
  kv/kv_simd.cpp
  kv/kv_validate.cpp)
# The pool shared by the processes of a node (shared_kv_block_pool.hpp).
list(APPEND UNIPOOL_SOURCES
  kv/shared/shared_handover.cpp
  kv/shared/shared_layout.cpp
  kv/shared/shared_members.cpp
  kv/shared/shared_open.cpp
  kv/shared/shared_ops.cpp
  kv/shared/shared_query.cpp
  kv/shared/shared_recover.cpp
  kv/shared/shared_server.cpp
  kv/shared/shared_validate.cpp)
