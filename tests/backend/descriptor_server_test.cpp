// The descriptor server (backend/os): descriptors published by this process
// reach a forked child over the abstract socket until withdrawn; requests
// that are not of the protocol are dropped without stopping the server; a
// fork child closes its copies of its parent's and serves its own under a
// name of its own.
#include "backend/os/descriptor_server.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "backend/os/unix_socket.hpp"
#include "nullgpu_fixture.hpp"

namespace unipool::test {
namespace {

using backend::os::fetch_descriptors;
using backend::os::publish_descriptor;
using backend::os::withdraw_descriptor;

// A pipe whose read end is published (the server owns it then); the child
// reads what the parent wrote.
struct Published {
  int fds[2] = {-1, -1};
  uint64_t id = 0;
  std::string server;
  Published() {
    EXPECT_EQ(pipe(fds), 0);
    EXPECT_EQ(write(fds[1], "hi", 2), 2);
    EXPECT_TRUE(publish_descriptor(fds[0], &id, &server).is_ok());
  }
  ~Published() {
    withdraw_descriptor(id);  // closes fds[0]
    close(fds[1]);
  }
};

// In a child: fetches `id` from `server`; true if it reads "hi" from it.
bool child_reads(const std::string& server, uint64_t id) {
  int fd = -1;
  if (!fetch_descriptors(server, &id, 1, &fd).is_ok()) return false;
  char text[2] = {};
  const bool ok = read(fd, text, 2) == 2 && std::memcmp(text, "hi", 2) == 0;
  close(fd);
  return ok;
}

TEST(DescriptorServer, LendsUntilWithdrawn) {
  Published p;
  EXPECT_TRUE(in_child([&] { return child_reads(p.server, p.id); }));
  uint64_t ids[2] = {p.id, p.id + 1000};  // the second was never published
  int fds[2] = {-1, -1};
  const BackendStatus s = fetch_descriptors(p.server, ids, 2, fds);
  EXPECT_NE(std::string(s.message).find("freed or unmapped"), std::string::npos) << s.message;
  EXPECT_EQ(fds[0], -1);  // all or none: the first was closed again
  withdraw_descriptor(p.id);
  EXPECT_EQ(fcntl(p.fds[0], F_GETFD), -1);  // the server closed it
  EXPECT_FALSE(in_child([&] { return child_reads(p.server, p.id); }));
}

TEST(DescriptorServer, RefusesBadArgumentsAndUnknownServers) {
  uint64_t id = 1;
  int fd = -1;
  EXPECT_FALSE(fetch_descriptors("unipool.fds.nobody", &id, 1, &fd).is_ok());
  EXPECT_NE(std::string(fetch_descriptors("unipool.fds.nobody", &id, 1, &fd).message)
                .find("process sharing the memory is gone"),
            std::string::npos);
  EXPECT_FALSE(fetch_descriptors("x", &id, 0, &fd).is_ok());
  EXPECT_FALSE(fetch_descriptors("x", &id, backend::os::kMaxFetch + 1, &fd).is_ok());
  uint64_t out = 0;
  std::string server;
  EXPECT_FALSE(publish_descriptor(-1, &out, &server).is_ok());
}

TEST(DescriptorServer, DropsRequestsOfAnotherProtocolAndServesOn) {
  Published p;
  for (const std::string& junk : {std::string("hello"), std::string(16, '\xff'), std::string()}) {
    const int conn = backend::os::connect_abstract(p.server, 0);
    ASSERT_GE(conn, 0);
    ASSERT_TRUE(backend::os::send_all(conn, junk.data(), junk.size()));
    shutdown(conn, SHUT_WR);
    char byte = 0;
    EXPECT_EQ(recv(conn, &byte, 1, 0), 0);  // closed without an answer
    close(conn);
  }
  EXPECT_TRUE(in_child([&] { return child_reads(p.server, p.id); }));
}

#if !defined(__SANITIZE_THREAD__)  // TSan does not let a child of a threaded process start threads
TEST(DescriptorServer, AForkChildServesUnderItsOwnName) {
  Published parent;
  int names[2];
  ASSERT_EQ(pipe(names), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(names[0]);
    // Its copy of what the parent lends is closed at the fork.
    const bool closed = fcntl(parent.fds[0], F_GETFD) == -1;
    Published mine;  // the child's own server: the parent's is not its to serve
    const bool own = mine.server != parent.server && closed;
    const std::string message =
        (own ? "" : "same name or kept descriptor ") + mine.server + "\n" + std::to_string(mine.id);
    (void)!write(names[1], message.data(), message.size());
    close(names[1]);
    _exit(own ? 0 : 1);
  }
  close(names[1]);
  char text[256] = {};
  const ssize_t n = read(names[0], text, sizeof text - 1);
  close(names[0]);
  ASSERT_GT(n, 0);
  const std::string reply(text, static_cast<size_t>(n));
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << reply;
  // The child is gone, and its server with it.
  const std::string child_server = reply.substr(0, reply.find('\n'));
  uint64_t id = std::stoull(reply.substr(reply.find('\n') + 1));
  int fd = -1;
  EXPECT_NE(
      std::string(fetch_descriptors(child_server, &id, 1, &fd).message).find("process sharing the memory is gone"),
      std::string::npos);
  EXPECT_TRUE(in_child([&] { return child_reads(parent.server, parent.id); }));  // the parent's still serves
}
#endif

}  // namespace
}  // namespace unipool::test
