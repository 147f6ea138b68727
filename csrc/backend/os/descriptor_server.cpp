#include "backend/os/descriptor_server.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backend/os/unix_socket.hpp"

namespace unipool::backend::os {
namespace {

// A request: the magic word, the count, then `count` ids. An answer per id:
// the magic word and a found flag, with the descriptor when found.
constexpr uint64_t kMagic = 0x7364666c6f6f7075;  // "upoolfds"
constexpr uint64_t kMaxIds = uint64_t{1} << 16;  // 128 GiB of 2 MiB granules

struct Answer {
  uint64_t magic;
  uint64_t found;
};

BackendStatus fail(const char* message, int native = 0) { return BackendStatus{BackendStatus::error, native, message}; }

class Server {
 public:
  static Server& of_this_process() {
    static auto* server = new Server;  // its thread may serve until the process ends
    return *server;
  }

  BackendStatus publish(int fd, uint64_t* id, std::string* name) {
    std::lock_guard lock(mutex_);
    if (listen_fd_ < 0) {
      if (BackendStatus s = start_locked(); !s.is_ok()) return s;
    }
    *id = next_id_++;
    published_.emplace(*id, fd);
    *name = name_;
    return BackendStatus::success();
  }

  void withdraw(uint64_t id) noexcept {
    std::lock_guard lock(mutex_);
    published_.erase(id);
  }

 private:
  Server() {
    // A fork child has no server thread and must not answer for its
    // parent: it starts afresh (its inherited socket is closed by
    // unix_socket's fork handler). The lock is held across the fork.
    pthread_atfork([] { of_this_process().mutex_.lock(); }, [] { of_this_process().mutex_.unlock(); },
                   [] {
                     Server& s = of_this_process();
                     s.listen_fd_ = -1;
                     s.published_.clear();
                     s.mutex_.unlock();
                   });
  }

  BackendStatus start_locked() {
    // A random part: a name is never reused by a later process of this pid.
    name_ = "unipool.fds." + std::to_string(getpid()) + "." + std::to_string(std::random_device{}());
    const int fd = listen_abstract(name_);
    if (fd < 0) return fail("unipool: cannot listen on a socket to share descriptors", errno);
    listen_fd_ = fd;
    std::thread([this, fd] { serve(fd); }).detach();
    return BackendStatus::success();
  }

  // Until the process ends (or forks: the child's copy of the socket is
  // closed, the parent's thread goes on).
  void serve(int listen_fd) noexcept {
    for (;;) {
      pollfd p{listen_fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
      const int conn = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval timeout{2, 0};  // a client that connects and says nothing
      setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      if (peer_is_same_user(conn)) answer(conn);
      close(conn);
    }
  }

  void answer(int conn) noexcept {
    uint64_t header[2] = {};
    if (!read_all(conn, header, sizeof header) || header[0] != kMagic || header[1] > kMaxIds) return;
    // Every id before any answer: a client sends them all before reading.
    std::vector<uint64_t> ids(header[1]);
    if (!read_all(conn, ids.data(), ids.size() * sizeof(uint64_t))) return;
    for (const uint64_t id : ids) {
      // Sent under the lock: a withdrawn descriptor may be closed (and its
      // number reused) as soon as withdraw() returns.
      std::lock_guard lock(mutex_);
      const auto it = published_.find(id);
      const Answer a{kMagic, it != published_.end() ? 1u : 0u};
      if (!send_with_fd(conn, &a, sizeof a, it != published_.end() ? it->second : -1)) return;
    }
  }

  static bool read_all(int conn, void* data, size_t bytes) noexcept {
    auto* at = static_cast<char*>(data);
    while (bytes != 0) {
      const ssize_t got = recv(conn, at, bytes, 0);
      if (got <= 0) return false;
      at += got;
      bytes -= static_cast<size_t>(got);
    }
    return true;
  }

  std::mutex mutex_;
  int listen_fd_ = -1;
  std::string name_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, int> published_;
};

}  // namespace

BackendStatus publish_descriptor(int fd, uint64_t* id, std::string* server) {
  if (fd < 0 || id == nullptr || server == nullptr) return fail("unipool: publish_descriptor: bad arguments");
  return Server::of_this_process().publish(fd, id, server);
}

void withdraw_descriptor(uint64_t id) noexcept { Server::of_this_process().withdraw(id); }

namespace {

// One descriptor's answer: its copy in *fd, or a reason.
BackendStatus receive_one(int conn, int* fd) {
  Answer a{};
  const ssize_t got = receive_with_fd(conn, &a, sizeof a, fd);
  if (got == static_cast<ssize_t>(sizeof a) && a.magic == kMagic && a.found == 1 && *fd >= 0) {
    return BackendStatus::success();
  }
  if (*fd >= 0) close(*fd);
  *fd = -1;
  if (got < 0) return fail("unipool: the process sharing the memory did not answer", errno);
  if (got == 0) return fail("unipool: the process sharing the memory refused the request");
  if (a.magic != kMagic) return fail("unipool: the process sharing the memory answered in another protocol");
  return fail("unipool: the shared memory is gone (the sending process freed or unmapped it)");
}

}  // namespace

BackendStatus fetch_descriptors(const std::string& server, const uint64_t* ids, size_t count, int* fds) {
  if (count == 0 || count > kMaxIds || ids == nullptr || fds == nullptr) {
    return fail("unipool: fetch_descriptors: bad arguments");
  }
  const int conn = connect_abstract(server, 0);
  if (conn < 0) return fail("unipool: the process sharing the memory is gone", errno);
  const uint64_t header[2] = {kMagic, count};
  BackendStatus status;
  if (send(conn, header, sizeof header, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof header) ||
      send(conn, ids, count * sizeof *ids, MSG_NOSIGNAL) != static_cast<ssize_t>(count * sizeof *ids)) {
    status = fail("unipool: could not ask the process sharing the memory", errno);
  }
  size_t got = 0;
  for (; status.is_ok() && got < count; ++got) status = receive_one(conn, &fds[got]);
  close(conn);
  if (status.is_ok()) return status;
  for (size_t i = 0; i + 1 < got; ++i) close(fds[i]);  // all or none
  return status;
}

}  // namespace unipool::backend::os
