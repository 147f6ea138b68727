// unipool kv: checks on the memory of a KV arena, shared by KVBlockPool and
// SharedKVBlockPool.
#pragma once

#include <cstdint>

namespace unipool {

// Checks a pool's shape and returns its stride (block_bytes rounded up to
// alignment). Throws std::invalid_argument naming `who` and the option:
// block_bytes 0 or > 2^62, num_blocks outside 1 .. 2^31, alignment not a
// power of two <= 2 MiB, max_pin < 2 MiB, an arena > 2^62 bytes.
uint64_t kv_check_layout(uint64_t block_bytes, uint64_t num_blocks, uint64_t alignment, uint64_t max_pin,
                         const char* who);

// An arena larger than the machine's RAM + swap can never be backed: its
// first touch (or the first copies into it) would fault until the kernel
// kills the process. Throws std::runtime_error naming `who` and both sizes.
// The reservation is also accounted (os_memory.hpp), so the kernel's own
// overcommit policy applies to what passes this check.
void kv_check_fits_machine(uint64_t bytes, const char* who);

}  // namespace unipool
