// unipool backend/os: abstract Unix sockets between processes of one host,
// and descriptors passed over them (SCM_RIGHTS). An abstract name is no
// file: the kernel frees it with the last socket bound to it, however the
// process died, so nothing is left behind.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace unipool::backend::os {

// Binds and listens on `name` (non-blocking, close-on-exec). Returns the
// socket, or -1 with errno (EADDRINUSE: a live process holds the name).
// Close it with close_listening(). A fork handler closes a child's copy:
// a child that kept one would hold the name after the parent left, and
// callers would connect to a socket nobody answers.
int listen_abstract(const std::string& name) noexcept;
void close_listening(int fd) noexcept;

// Connects to `name`; a refused connection (nobody bound, or a server
// restarting) is retried every 10 ms for `retry_ms`. Returns the socket
// (close-on-exec, sends and receives time out after 5 s), or -1 with errno.
int connect_abstract(const std::string& name, int retry_ms) noexcept;

// Whether the process at the other end runs as this process's user.
bool peer_is_same_user(int conn) noexcept;
// Accepts a connection on `listen_fd` (close-on-exec) from a process of
// this user; another user's is closed unanswered. With timeout_s > 0, its
// sends and receives time out after that long: a client that stops
// reading must not hold a server's only thread. Returns the connection, or
// -1 with errno (EACCES: another user's).
int accept_same_user(int listen_fd, int timeout_s) noexcept;

// Sends `bytes` of `data` in one message, with a copy of `fd` when fd >= 0.
bool send_with_fd(int conn, const void* data, size_t bytes, int fd) noexcept;
// Receives one message of up to `bytes` into `data`, and the descriptor it
// carried into *fd (-1 if none; close-on-exec). Returns the bytes
// received, or -1 with errno (EMFILE: this process had no room for the
// descriptor, which the kernel dropped).
ssize_t receive_with_fd(int conn, void* data, size_t bytes, int* fd) noexcept;

// All `bytes`, however the kernel splits them and whatever signal comes.
bool send_all(int conn, const void* data, size_t bytes) noexcept;
// All `bytes` within `timeout_ms` in total (errno ETIMEDOUT), so a peer
// that sends a byte at a time cannot hold the caller.
bool receive_all(int conn, void* data, size_t bytes, int timeout_ms) noexcept;

}  // namespace unipool::backend::os
