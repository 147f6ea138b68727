// unipool kv shared: the member table, and telling a live member from a
// dead one.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "kv/shared/shared_layout.hpp"

namespace unipool::kv_shared {

// The start time of process pid (/proc/<pid>/stat field 22, in clock ticks
// since boot), or 0 if it cannot be read (no such process).
uint64_t start_time_of(pid_t pid) noexcept;

// Whether the member's process is alive: a pidfd opened on its pid that is
// not yet readable (a pidfd polls readable once the process exited, zombies
// included), and the process behind it started when the member did (else
// the pid was reused). Without pidfd_open (Linux < 5.3), kill(pid, 0).
bool member_alive(const Member& m) noexcept;

// Waits up to timeout_ms for the member's process to be gone (its pidfd
// readable). A process that dies lets go of its robust futexes early in its
// exit, before its pidfd says it exited: a locker told the holder died
// waits for the rest of that exit before it looks for dead members.
void await_exit(const Member& m, int timeout_ms) noexcept;

// Lock held. Takes an empty slot for this process; -1 if none is left.
int join(Header& h) noexcept;

}  // namespace unipool::kv_shared
