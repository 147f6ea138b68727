// unipool backend/os: lends this process's file descriptors to other
// processes of its user. A descriptor is published under an id; a process
// that knows the server's name and the id receives a copy over an abstract
// Unix socket, until the descriptor is withdrawn. This is how CUDA VMM
// memory reaches other processes: cuMemExportToShareableHandle gives a
// descriptor, and the IPC handle carries the server's name and the ids.
//
// A socket needs no ptrace permission, where pidfd_getfd does: under Yama's
// ptrace_scope=1 a child could not take its parent's descriptors.
//
// One server per process, started by the first publish, answering from a
// thread of its own; a fork child starts its own, and closes its copies of
// its parent's descriptors. Only processes of the same user are answered
// (SO_PEERCRED).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "unipool/device_backend.hpp"

namespace unipool::backend::os {

// The most descriptors one fetch asks for: the caller needs room for them
// all at once.
inline constexpr size_t kMaxFetch = 64;

// Publishes `fd` and takes it over (closed on failure too), close-on-exec
// from then on. Returns its id in *id and the server's name in *server.
BackendStatus publish_descriptor(int fd, uint64_t* id, std::string* server) noexcept;
// Closes the descriptor: no process receives a new copy of it.
void withdraw_descriptor(uint64_t id) noexcept;
// The name this process serves under; empty until it publishes (again, in
// a fork child, whose parent's descriptors are closed and ids void).
std::string descriptor_server_name();

// Receives copies of the descriptors published under ids[0..count) at
// `server` (count <= kMaxFetch), into fds[0..count): all of them, or none
// and an error.
BackendStatus fetch_descriptors(const std::string& server, const uint64_t* ids, size_t count, int* fds);

}  // namespace unipool::backend::os
