// unipool kv shared: the socket that hands out the memfd.
#include "kv/shared/shared_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "backend/os/unix_socket.hpp"

namespace unipool::kv_shared {
namespace {

// A message names the protocol, so a stray connection to the name is told
// apart from a pool's server.
constexpr uint64_t kHello = 0x6f6c6c65686b7075;  // "upkhello"

std::string socket_name(const std::string& name) { return "unipool.kv." + name; }

}  // namespace

int listen_on(const std::string& name) noexcept { return backend::os::listen_abstract(socket_name(name)); }

// When the serving member just went, another takes the name over within
// milliseconds: a refused connection is retried for half a second before
// the pool counts as gone.
int receive_pool_fd(const std::string& name, std::string* why) {
  const int s = backend::os::connect_abstract(socket_name(name), 500);
  if (s < 0) {
    *why = errno == ECONNREFUSED || errno == ENOENT
               ? "no process serves it (it was never created, or every process that had it attached is gone)"
               : std::string("connect: ") + std::strerror(errno);
    return -1;
  }
  uint64_t hello = 0;
  int fd = -1;
  const ssize_t got = backend::os::receive_with_fd(s, &hello, sizeof hello, &fd);
  const int e = errno;
  close(s);
  if (got == static_cast<ssize_t>(sizeof hello) && hello == kHello && fd >= 0) return fd;
  if (fd >= 0) close(fd);
  *why = got < 0 ? std::string("no answer from its server: ") + std::strerror(e)
                 : "its server answered with something that is not a unipool pool (another program owns the name?)";
  return -1;
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
    serve();
    backend::os::close_listening(listen_fd_);
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
    const int conn = backend::os::accept_same_user(listen_fd_, 0);
    if (conn < 0) continue;
    backend::os::send_with_fd(conn, &kHello, sizeof kHello, memfd_);
    close(conn);
  }
}

}  // namespace unipool::kv_shared
