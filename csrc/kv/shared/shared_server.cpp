// unipool kv shared: the socket that hands out the memfd.
#include "kv/shared/shared_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace unipool::kv_shared {
namespace {

// A message names the protocol, so a stray connection to the name is told
// apart from a pool's server.
constexpr uint64_t kHello = 0x6f6c6c65686b7075;  // "upkhello"

socklen_t address_of(const std::string& name, sockaddr_un* a) noexcept {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  const std::string path = "unipool.kv." + name;  // after the leading '\0': abstract
  std::memcpy(a->sun_path + 1, path.data(), path.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + path.size());
}

// One message of the protocol: the hello word, and room for one descriptor.
struct Message {
  uint64_t hello = 0;
  iovec iov{&hello, sizeof hello};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};

  Message() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
};

bool send_fd(int conn, int fd) noexcept {
  Message m;
  m.hello = kHello;
  msghdr& msg = m.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m.hello);
}

bool same_user(int conn) noexcept {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == geteuid();
}

// Connects to the pool's name. When the serving member just went, another
// takes the name over within milliseconds: a refused connection is retried
// for half a second before the pool counts as gone.
int connect_to(const std::string& name, std::string* why) {
  sockaddr_un a;
  const socklen_t len = address_of(name, &a);
  for (int tries = 0;; ++tries) {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
      *why = std::string("socket: ") + std::strerror(errno);
      return -1;
    }
    if (connect(s, reinterpret_cast<sockaddr*>(&a), len) == 0) return s;
    const int e = errno;
    close(s);
    if ((e == ECONNREFUSED || e == ENOENT) && tries < 50) {
      usleep(10'000);
      continue;
    }
    *why = e == ECONNREFUSED || e == ENOENT
               ? "no process serves it (it was never created, or every process that had it attached is gone)"
               : std::string("connect: ") + std::strerror(e);
    return -1;
  }
}

// The sockets this process listens on, + 1 (0: an empty slot): a fork
// handler closes them without taking a lock.
std::atomic<int> g_listening[64];

void note_listening(int fd) noexcept {
  for (std::atomic<int>& slot : g_listening) {
    int empty = 0;
    if (slot.compare_exchange_strong(empty, fd + 1)) return;
  }
}

void forget_listening(int fd) noexcept {
  for (std::atomic<int>& slot : g_listening) {
    int mine = fd + 1;
    if (slot.compare_exchange_strong(mine, 0)) return;
  }
}

}  // namespace

void close_listening_sockets_in_child() noexcept {
  for (std::atomic<int>& slot : g_listening) {
    const int fd = slot.exchange(0) - 1;
    if (fd >= 0) close(fd);
  }
}

int listen_on(const std::string& name) noexcept {
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  sockaddr_un a;
  const socklen_t len = address_of(name, &a);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(s, 64) != 0) {
    const int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  return s;
}

int receive_pool_fd(const std::string& name, std::string* why) {
  const int s = connect_to(name, why);
  if (s < 0) return -1;
  timeval timeout{5, 0};  // a server that accepted but never answers
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  Message m;
  msghdr& msg = m.msg;
  const uint64_t& hello = m.hello;
  const ssize_t got = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
  close(s);
  const cmsghdr* c = got > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (got != static_cast<ssize_t>(sizeof hello) || hello != kHello || !c || c->cmsg_type != SCM_RIGHTS) {
    if (c && c->cmsg_type == SCM_RIGHTS) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      close(fd);
    }
    *why = got < 0 ? std::string("no answer from its server: ") + std::strerror(errno)
                   : "its server answered with something that is not a unipool pool (another program owns the name?)";
    return -1;
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

Server::Server(Header& header, int memfd, std::string name, int listen_fd)
    : header_(header), memfd_(memfd), name_(std::move(name)), listen_fd_(listen_fd) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) throw std::runtime_error(std::string("SharedKVBlockPool: eventfd: ") + std::strerror(errno));
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    close(stop_fd_);
    throw;
  }
}

Server::~Server() {
  stopping_.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof one);
  thread_.join();
  close(stop_fd_);
}

void Server::run() noexcept {
  if (!take_role()) return;  // asked to stop while another member served
  // The name of a server that died is free once its socket closed, which
  // the kernel does as the process goes: retry binding for a while.
  for (int tries = 0; listen_fd_ < 0 && !stopping_.load(std::memory_order_relaxed); ++tries) {
    listen_fd_ = listen_on(name_);
    if (listen_fd_ < 0) {
      pollfd p{stop_fd_, POLLIN, 0};
      poll(&p, 1, tries < 10 ? 10 : 200);
    }
  }
  if (listen_fd_ >= 0) {
    note_listening(listen_fd_);
    serve();
    forget_listening(listen_fd_);
    close(listen_fd_);
  }
  pthread_mutex_unlock(&header_.serve_lock);  // the next member takes over
}

// Polls for the lock every 10 ms rather than blocking in it: a member asked
// to detach stops waiting at once, and the kernel's word that the holder
// died comes back from trylock as it does from lock.
bool Server::take_role() noexcept {
  for (;;) {
    const int rc = pthread_mutex_trylock(&header_.serve_lock);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&header_.serve_lock);
    if (rc == 0 || rc == EOWNERDEAD) return true;
    pollfd p{stop_fd_, POLLIN, 0};
    if (poll(&p, 1, 10) == 1) return false;
  }
}

void Server::serve() noexcept {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    if (same_user(conn)) send_fd(conn, memfd_);
    close(conn);
  }
}

}  // namespace unipool::kv_shared
