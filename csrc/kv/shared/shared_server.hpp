// unipool kv shared: passing the pool's memfd to attaching processes over
// an abstract Unix socket ("\0unipool.kv.<name>": no file, gone with the
// last process holding it).
//
// One member serves at a time: the one holding the header's serve_lock, a
// robust mutex, from a thread of its own. With SharedKVLifetime::
// while_attached every member runs that thread; those not serving wait for
// the lock, and when the server detaches (it unlocks) or dies (the kernel
// marks the lock's owner dead) one of them takes over and binds the name.
// Only processes of the server's own user are served (SO_PEERCRED).
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "kv/shared/shared_layout.hpp"

namespace unipool::kv_shared {

// Binds and listens on the pool's name. Returns the socket (close it with
// backend::os::close_listening), or -1 with errno (EADDRINUSE: a live
// process serves a pool of that name).
int listen_on(const std::string& name) noexcept;

// Connects to the pool's name and receives its memfd. Returns it, or -1
// with *why set.
int receive_pool_fd(const std::string& name, std::string* why);

class Server {
 public:
  // listen_fd: a socket listen_on() bound (the creator), or -1 to wait for
  // the serving role.
  Server(Header& header, int memfd, std::string name, int listen_fd);
  ~Server();  // stops serving, hands the role on
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  void run() noexcept;
  bool take_role() noexcept;  // false when asked to stop first
  void serve() noexcept;

  Header& header_;
  int memfd_;
  std::string name_;
  int listen_fd_;
  int stop_fd_;  // an eventfd: readable once the destructor asks to stop
  std::atomic<bool> stopping_{false};  // set before stop_fd_ is written
  std::thread thread_;
};

}  // namespace unipool::kv_shared
