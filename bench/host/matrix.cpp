#include "matrix.hpp"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tsc_clock.hpp"

extern char** environ;

namespace host_bench {
namespace {

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buf, static_cast<size_t>(n));
}

// This process's environment without the variables a cell sets itself.
std::vector<std::string> child_environment(const Peer& peer) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 || std::strncmp(*e, "UNIPOOL_HOST_CONF=", 18) == 0) continue;
    env.emplace_back(*e);
  }
  if (!peer.preload.empty()) env.push_back("LD_PRELOAD=" + peer.preload);
  if (!peer.unipool_conf.empty()) env.push_back("UNIPOOL_HOST_CONF=" + peer.unipool_conf);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Reads the child's stdout until EOF or the deadline; false on timeout.
bool read_until_eof(int fd, std::string& out, double timeout_s) {
  const uint64_t deadline = monotonic_ns() + static_cast<uint64_t>(timeout_s * 1e9);
  char buf[4096];
  for (;;) {
    const uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(std::min<uint64_t>((deadline - now) / 1'000'000 + 1, 1000));
    if (poll(&p, 1, ms) < 0 && errno != EINTR) return false;
    if (p.revents == 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::optional<CellResult> run_cell(const Peer& peer, const std::string& workload, unsigned threads,
                                   const MatrixOptions& opt) {
  const double timeout_s = opt.timeout_s;
  std::vector<std::string> args = {self_path(), "--child", "--workload", workload, "--threads",
                                   std::to_string(threads)};
  if (opt.quick) args.emplace_back("--quick");
  if (!opt.pin) args.emplace_back("--no-pin");
  if (!peer.expect_symbol.empty()) {
    args.emplace_back("--expect-symbol");
    args.push_back(peer.expect_symbol);
  }
  std::vector<std::string> env = child_environment(peer);
  auto argv = c_strings(args);
  auto envp = c_strings(env);

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return std::nullopt;
  }

  std::string out;
  const bool finished = read_until_eof(pipe_fds[0], out, timeout_s);
  close(pipe_fds[0]);
  if (!finished) {
    std::fprintf(stderr, "host_bench: %s %s x%u timed out after %.0f s\n", peer.name.c_str(), workload.c_str(),
                 threads, timeout_s);
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "host_bench: %s %s x%u failed (%s %d)\n", peer.name.c_str(), workload.c_str(), threads,
                 WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return std::nullopt;
  }
  try {
    CellResult r = cell_from_json(nlohmann::json::parse(out));
    r.allocator = peer.name;
    return r;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_bench: bad child output for %s %s: %s\n", peer.name.c_str(), workload.c_str(),
                 e.what());
    return std::nullopt;
  }
}

MatrixResult run_matrix(const MatrixOptions& opt) {
  MatrixResult out;
  std::vector<CellResult>& results = out.cells;
  for (const auto& workload : opt.workloads) {
    std::vector<Peer> peers;
    for (const auto& p : opt.peers) {
      if (workload == "rpmalloc_random" && p.name == "unipool" && !opt.policy_peers.empty()) continue;
      peers.push_back(p);
    }
    if (workload == "rpmalloc_random") peers.insert(peers.end(), opt.policy_peers.begin(), opt.policy_peers.end());

    for (const unsigned threads : opt.threads) {
      // Repeats go round the allocators, so a slow spell of the machine
      // touches every allocator rather than one.
      std::vector<std::vector<CellResult>> runs(peers.size());
      for (unsigned rep = 0; rep < opt.repeat; ++rep) {
        for (size_t i = 0; i < peers.size(); ++i) {
          if (!peers[i].available) continue;
          std::fprintf(stderr, "  %-18s %-20s x%u run %u/%u\n", workload.c_str(), peers[i].name.c_str(), threads,
                       rep + 1, opt.repeat);
          if (auto r = run_cell(peers[i], workload, threads, opt)) {
            runs[i].push_back(*r);
          } else {
            ++out.failed_runs;
          }
        }
      }
      for (auto& cell_runs : runs) {
        if (cell_runs.empty()) continue;
        // By ops per CPU-second, the measure the targets are stated in and
        // the one other load on the machine disturbs least.
        std::sort(cell_runs.begin(), cell_runs.end(),
                  [](const CellResult& a, const CellResult& b) { return a.ops_per_cpu_s < b.ops_per_cpu_s; });
        results.push_back(cell_runs[cell_runs.size() / 2]);
      }
    }
  }
  return out;
}

}  // namespace host_bench
