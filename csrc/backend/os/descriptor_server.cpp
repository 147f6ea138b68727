#include "backend/os/descriptor_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>

#include "backend/os/unix_socket.hpp"

namespace unipool::backend::os {
namespace {

// A request: the magic word, the count, then `count` ids. An answer per id:
// the magic word and a found flag, with the descriptor when found.
constexpr uint64_t kMagic = 0x7364666c6f6f7075;  // "upoolfds"
constexpr int kRequestMs = 2000;                 // for a client to send its whole request

struct Answer {
  uint64_t magic;
  uint64_t found;
};
constexpr uint64_t kNotFound = 0, kFound = 1, kNoRoom = 2;  // Answer::found

BackendStatus fail(const char* message, int native = 0) { return BackendStatus{BackendStatus::error, native, message}; }

class Server {
 public:
  static Server& of_this_process() {
    static auto* server = new Server;  // its thread may serve until the process ends
    return *server;
  }

  // Takes `fd` over, whatever happens.
  BackendStatus publish(int fd, uint64_t* id, std::string* name) noexcept {
    std::lock_guard lock(mutex_);
    if (listen_fd_ < 0) {
      if (BackendStatus s = start_locked(); !s.is_ok()) {
        close(fd);
        return s;
      }
    }
    try {
      *name = name_;  // first: nothing may throw once the descriptor is filed
      published_.emplace(next_id_, fd);
    } catch (const std::bad_alloc&) {
      close(fd);
      return BackendStatus{BackendStatus::out_of_memory, ENOMEM, "unipool: out of memory to share a descriptor"};
    }
    *id = next_id_++;
    return BackendStatus::success();
  }

  void withdraw(uint64_t id) noexcept {
    std::lock_guard lock(mutex_);
    if (const auto it = published_.find(id); it != published_.end()) {
      close(it->second);
      published_.erase(it);
    }
  }

  std::string name() {
    std::lock_guard lock(mutex_);
    return listen_fd_ < 0 ? std::string() : name_;
  }

 private:
  Server() {
    // A fork child has no server thread and must not answer for its
    // parent: it starts afresh (its inherited socket is closed by
    // unix_socket's fork handler). It closes its copies of the published
    // descriptors: an exported descriptor holds device memory, which the
    // parent's unmap could not free while a child kept one. The lock is
    // held across the fork.
    pthread_atfork([] { of_this_process().mutex_.lock(); }, [] { of_this_process().mutex_.unlock(); },
                   [] {
                     Server& s = of_this_process();
                     for (const auto& [id, fd] : s.published_) close(fd);
                     s.published_.clear();
                     s.listen_fd_ = -1;
                     s.mutex_.unlock();
                   });
  }

  BackendStatus start_locked() noexcept {
    try {
      // A random part: a name is never reused by a later process of this pid.
      name_ = "unipool.fds." + std::to_string(getpid()) + "." + std::to_string(std::random_device{}());
    } catch (const std::exception&) {
      return fail("unipool: cannot name a socket to share descriptors");
    }
    const int fd = listen_abstract(name_);
    if (fd < 0) return fail("unipool: cannot listen on a socket to share descriptors", errno);
    // Returns once the thread runs its own code, still under the lock a
    // fork takes: a fork may then never copy the thread in the middle of
    // its start-up, with whatever lock that holds. A sanitizer's allocator
    // (not fork-safe) deadlocked a fork child that way, when the child
    // allocated in its own server thread.
    try {
      auto started = std::make_shared<std::promise<void>>();  // the thread's own reference
      std::future<void> running = started->get_future();
      std::thread([this, fd, started] {
        started->set_value();
        serve(fd);
      }).detach();
      running.wait();
    } catch (const std::exception&) {
      close_listening(fd);
      return fail("unipool: cannot start the thread that shares descriptors");
    }
    listen_fd_ = fd;
    return BackendStatus::success();
  }

  // Until the process ends (or forks: the child's copy of the socket is
  // closed, the parent's thread goes on).
  void serve(int listen_fd) noexcept {
    for (;;) {
      pollfd p{listen_fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
      const int conn = accept_same_user(listen_fd, 2);
      if (conn < 0) {
        // Out of descriptors: wait for some to close rather than spin.
        if (errno == EMFILE || errno == ENFILE) poll(nullptr, 0, 100);
        continue;
      }
      answer(conn);
      close(conn);
    }
  }

  void answer(int conn) noexcept {
    uint64_t header[2] = {};
    if (!receive_all(conn, header, sizeof header, kRequestMs) || header[0] != kMagic || header[1] == 0 ||
        header[1] > kMaxFetch) {
      return;
    }
    // Every id before any answer: a client sends them all before reading.
    uint64_t ids[kMaxFetch];
    if (!receive_all(conn, ids, header[1] * sizeof(uint64_t), kRequestMs)) return;
    for (uint64_t i = 0; i < header[1]; ++i) {
      // A copy taken under the lock (the caller may close its descriptor as
      // soon as withdraw() returns), sent without it: a slow client must
      // not hold up withdraw(), nor a fork.
      int copy = -1;
      uint64_t found = kNotFound;
      {
        std::lock_guard lock(mutex_);
        const auto it = published_.find(ids[i]);
        if (it != published_.end()) {
          copy = fcntl(it->second, F_DUPFD_CLOEXEC, 0);
          found = copy >= 0 ? kFound : kNoRoom;
        }
      }
      const Answer a{kMagic, found};
      const bool sent = send_with_fd(conn, &a, sizeof a, copy);
      if (copy >= 0) close(copy);
      if (!sent) return;
    }
  }

  std::mutex mutex_;
  int listen_fd_ = -1;
  std::string name_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, int> published_;
};

}  // namespace

BackendStatus publish_descriptor(int fd, uint64_t* id, std::string* server) noexcept {
  if (fd < 0 || id == nullptr || server == nullptr) {
    if (fd >= 0) close(fd);
    return fail("unipool: publish_descriptor: bad arguments");
  }
  // A program this process runs must not keep what the descriptor holds
  // (device memory, for one) after it is withdrawn.
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  return Server::of_this_process().publish(fd, id, server);
}

void withdraw_descriptor(uint64_t id) noexcept { Server::of_this_process().withdraw(id); }

std::string descriptor_server_name() { return Server::of_this_process().name(); }

namespace {

// One descriptor's answer: its copy in *fd, or a reason.
BackendStatus receive_one(int conn, int* fd) {
  Answer a{};
  const ssize_t got = receive_with_fd(conn, &a, sizeof a, fd);
  if (got == static_cast<ssize_t>(sizeof a) && a.magic == kMagic && a.found == kFound && *fd >= 0) {
    return BackendStatus::success();
  }
  if (*fd >= 0) close(*fd);
  *fd = -1;
  if (got < 0 && errno == EMFILE) return fail("unipool: this process is out of file descriptors", EMFILE);
  if (got < 0) return fail("unipool: the process sharing the memory did not answer", errno);
  if (got == 0) return fail("unipool: the process sharing the memory refused the request");
  if (a.magic != kMagic) return fail("unipool: the process sharing the memory answered in another protocol");
  if (a.found == kNoRoom) return fail("unipool: the process sharing the memory is out of file descriptors", EMFILE);
  return fail("unipool: the shared memory is gone (the sending process freed or unmapped it)");
}

}  // namespace

BackendStatus fetch_descriptors(const std::string& server, const uint64_t* ids, size_t count, int* fds) {
  if (count == 0 || count > kMaxFetch || ids == nullptr || fds == nullptr) {
    return fail("unipool: fetch_descriptors: bad arguments");
  }
  const int conn = connect_abstract(server, 0);
  if (conn < 0) return fail("unipool: the process sharing the memory is gone", errno);
  BackendStatus status;
  const uint64_t header[2] = {kMagic, count};
  if (!peer_is_same_user(conn)) {
    status = fail("unipool: the process sharing the memory runs as another user");
  } else if (!send_all(conn, header, sizeof header) || !send_all(conn, ids, count * sizeof *ids)) {
    status = fail("unipool: could not ask the process sharing the memory", errno);
  }
  size_t got = 0;
  for (; status.is_ok() && got < count; ++got) status = receive_one(conn, &fds[got]);
  close(conn);
  if (status.is_ok()) return status;
  for (size_t i = 0; i + 1 < got; ++i) {  // all or none
    close(fds[i]);
    fds[i] = -1;
  }
  return status;
}

}  // namespace unipool::backend::os
