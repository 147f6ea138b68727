#include "backend/os/unix_socket.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace unipool::backend::os {
namespace {

// 0 if the name does not fit (sun_path holds 107 bytes after the '\0').
socklen_t address_of(const std::string& name, sockaddr_un* a) noexcept {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (name.empty() || name.size() > sizeof a->sun_path - 1) return 0;
  std::memcpy(a->sun_path + 1, name.data(), name.size());  // after the leading '\0': abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// The sockets this process listens on, + 1 (0: an empty slot): the fork
// handler closes them without taking a lock.
std::atomic<int> g_listening[64];

// In a child of fork(): closes every socket this process listens on (see
// listen_abstract for why).
void close_listening_sockets_in_child() noexcept {
  for (std::atomic<int>& slot : g_listening) {
    const int fd = slot.exchange(0) - 1;
    if (fd >= 0) close(fd);
  }
}

// Registered when the library loads, not on first listen: a caller may
// listen while holding a lock that another fork handler takes, and
// pthread_atfork waits for the lock glibc holds across a fork.
const int g_watching_forks = pthread_atfork(nullptr, nullptr, close_listening_sockets_in_child);

// Sets a send and a receive timeout on `s`.
void set_timeouts(int s, int seconds) noexcept {
  timeval timeout{seconds, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
}

void note_listening(int fd) noexcept {
  for (std::atomic<int>& slot : g_listening) {
    int empty = 0;
    if (slot.compare_exchange_strong(empty, fd + 1)) return;
  }
}

}  // namespace

int listen_abstract(const std::string& name) noexcept {
  (void)g_watching_forks;
  sockaddr_un a;
  const socklen_t len = address_of(name, &a);
  if (len == 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(s, 64) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  note_listening(s);
  return s;
}

void close_listening(int fd) noexcept {
  for (std::atomic<int>& slot : g_listening) {
    int mine = fd + 1;
    if (slot.compare_exchange_strong(mine, 0)) break;
  }
  close(fd);
}

int connect_abstract(const std::string& name, int retry_ms) noexcept {
  sockaddr_un a;
  const socklen_t len = address_of(name, &a);
  if (len == 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (int waited = 0;; waited += 10) {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    set_timeouts(s, 5);  // a server whose backlog is full, or that never answers
    if (connect(s, reinterpret_cast<sockaddr*>(&a), len) == 0) return s;
    const int e = errno;
    close(s);
    if ((e != ECONNREFUSED && e != ENOENT) || waited >= retry_ms) {
      errno = e;
      return -1;
    }
    usleep(10'000);
  }
}

bool peer_is_same_user(int conn) noexcept {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == geteuid();
}

int accept_same_user(int listen_fd, int timeout_s) noexcept {
  const int conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (conn < 0) return -1;
  if (!peer_is_same_user(conn)) {
    close(conn);
    errno = EACCES;
    return -1;
  }
  if (timeout_s > 0) set_timeouts(conn, timeout_s);
  return conn;
}

bool send_with_fd(int conn, const void* data, size_t bytes, int fd) noexcept {
  iovec iov{const_cast<void*>(data), bytes};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes);
}

ssize_t receive_with_fd(int conn, void* data, size_t bytes, int* fd) noexcept {
  *fd = -1;
  iovec iov{data, bytes};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return -1;
  const cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
    std::memcpy(fd, CMSG_DATA(c), sizeof *fd);
  }
  // The kernel drops a descriptor this process has no room for.
  if (msg.msg_flags & MSG_CTRUNC) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    errno = EMFILE;
    return -1;
  }
  return got;
}

bool send_all(int conn, const void* data, size_t bytes) noexcept {
  const auto* at = static_cast<const char*>(data);
  while (bytes != 0) {
    const ssize_t sent = send(conn, at, bytes, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    at += sent;
    bytes -= static_cast<size_t>(sent);
  }
  return true;
}

bool receive_all(int conn, void* data, size_t bytes, int timeout_ms) noexcept {
  auto* at = static_cast<char*>(data);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (bytes != 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{conn, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    const ssize_t got = recv(conn, at, bytes, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    at += got;
    bytes -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace unipool::backend::os
