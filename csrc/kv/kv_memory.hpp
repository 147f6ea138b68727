// unipool kv: checks on the memory of a KV arena, shared by KVBlockPool and
// SharedKVBlockPool.
#pragma once

#include <cstdint>

namespace unipool {

// An arena larger than the machine's RAM + swap can never be backed: its
// first touch (or the first copies into it) would fault until the kernel
// kills the process. Throws std::runtime_error naming `who` and both sizes.
// The reservation is also accounted (os_memory.hpp), so the kernel's own
// overcommit policy applies to what passes this check.
void kv_check_fits_machine(uint64_t bytes, const char* who);

}  // namespace unipool
