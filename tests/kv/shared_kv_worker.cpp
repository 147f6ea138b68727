// A member process for the SharedKVBlockPool tests, which spawn it. Each
// scenario is one argv[1]; ids and "ready" go to stdout, one per line.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv/shared/shared_state.hpp"
#include "unipool/shared_kv_block_pool.hpp"

using unipool::SharedKVBlockPool;
using unipool::Status;
using unipool::kv_shared::HookPoint;

namespace {

HookPoint g_stop_at;
int g_stop_permille = 0;  // chance, per hook point reached, of dying there
std::minstd_rand g_rng;
bool g_stop_signal = false;  // SIGSTOP (the test then kills) rather than SIGKILL

void stop_here(HookPoint at) {
  if (at != g_stop_at || static_cast<int>(g_rng() % 1000) >= g_stop_permille) return;
  raise(g_stop_signal ? SIGSTOP : SIGKILL);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void wait_for_stdin_eof() {
  char c;
  while (read(0, &c, 1) > 0) {
  }
}

std::unique_ptr<SharedKVBlockPool> attach(const char* name) {
  unipool::SharedKVAttachOptions o;
  o.pinned = unipool::HostPinned::off;
  return SharedKVBlockPool::attach(name, o);
}

// Random calls until killed: batches allocated, freed (some handed over
// and taken back on the way), free_and_alloc.
[[noreturn]] void stress(SharedKVBlockPool& pool, unsigned seed) {
  std::minstd_rand rng(seed);
  std::vector<uint32_t> mine;
  std::vector<uint32_t> batch(64);
  say("ready");
  for (;;) {
    const unsigned op = rng() % 8;
    const size_t n = 1 + rng() % 64;
    if (op < 3) {
      if (pool.allocate(n, batch.data()) == Status::ok) mine.insert(mine.end(), batch.begin(), batch.begin() + n);
    } else if (op < 5 && !mine.empty()) {
      const size_t k = std::min(mine.size(), n);
      std::shuffle(mine.begin(), mine.end(), rng);
      if (pool.deallocate(mine.data() + mine.size() - k, k) != Status::ok) std::abort();
      mine.resize(mine.size() - k);
    } else if (op == 5 && !mine.empty()) {
      const size_t k = std::min(mine.size(), n);
      std::vector<uint32_t> out(n);
      if (pool.deallocate_and_allocate(mine.data() + mine.size() - k, k, n, out.data()) == Status::ok) {
        mine.resize(mine.size() - k);
        mine.insert(mine.end(), out.begin(), out.end());
      }
    } else if (op == 6 && !mine.empty()) {
      const std::vector<pid_t> members = pool.member_pids();
      const pid_t to = members[rng() % members.size()];
      const size_t k = std::min(mine.size(), n);
      if (to != getpid() && pool.hand_over(mine.data() + mine.size() - k, k, to) == Status::ok)
        mine.resize(mine.size() - k);
    } else if (op == 7) {
      std::vector<uint32_t> handed = pool.handed_to_me();
      if (!handed.empty() && pool.take_over(handed.data(), handed.size()) == Status::ok) {
        mine.insert(mine.end(), handed.begin(), handed.end());
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string scenario = argv[1];
  const char* name = argv[2];
  try {
    if (scenario == "stress") {  // stress NAME SEED STOP_POINT PERMILLE
      const unsigned seed = static_cast<unsigned>(std::atoi(argv[3]));
      g_rng.seed(seed);
      g_stop_at = static_cast<HookPoint>(std::atoi(argv[4]));
      g_stop_permille = std::atoi(argv[5]);
      unipool::kv_shared::set_test_hook(stop_here);
      auto pool = attach(name);
      stress(*pool, seed);
    }
    if (scenario == "stop_at") {  // stop_at NAME POINT ALLOC_N: SIGSTOP inside the call
      g_stop_at = static_cast<HookPoint>(std::atoi(argv[3]));
      g_stop_permille = 1000;
      g_stop_signal = true;
      auto pool = attach(name);
      std::vector<uint32_t> ids(64);
      pool->allocate(8, ids.data());  // owned, so a reclaim has work
      say("ready");
      unipool::kv_shared::set_test_hook(stop_here);
      if (g_stop_at == HookPoint::reclaiming) {
        pool->reclaim_dead();
      } else {
        pool->allocate(static_cast<size_t>(std::atoi(argv[4])), ids.data());
      }
      return 0;
    }
    if (scenario == "hand_over") {  // hand_over NAME N TO_PID BYTE: allocate, fill, hand over, wait
      auto pool = attach(name);
      const size_t n = static_cast<size_t>(std::atoi(argv[3]));
      std::vector<uint32_t> ids(n);
      if (pool->allocate(n, ids.data()) != Status::ok) return 3;
      for (uint32_t id : ids) std::memset(pool->block(id), std::atoi(argv[5]), pool->block_bytes());
      if (pool->hand_over(ids.data(), n, static_cast<pid_t>(std::atoi(argv[4]))) != Status::ok) {
        say(SharedKVBlockPool::last_error());
        return 4;
      }
      for (uint32_t id : ids) say(std::to_string(id));
      say("ready");
      wait_for_stdin_eof();
      return 0;
    }
    if (scenario == "hold") {  // hold NAME N: allocate n, report them, wait for stdin's end
      auto pool = attach(name);
      const size_t n = static_cast<size_t>(std::atoi(argv[3]));
      std::vector<uint32_t> ids(n);
      if (pool->allocate(n, ids.data()) != Status::ok) return 3;
      for (uint32_t id : ids) say(std::to_string(id));
      say("ready");
      wait_for_stdin_eof();
      return 0;
    }
    if (scenario == "check") {  // check NAME ID BYTE: the block's bytes as another process wrote them
      auto pool = attach(name);
      const auto* p = static_cast<const unsigned char*>(pool->block(static_cast<uint64_t>(std::atoll(argv[3]))));
      for (uint64_t i = 0; i < pool->block_bytes(); ++i) {
        if (p[i] != std::atoi(argv[4])) return 3;
      }
      return 0;
    }
    if (scenario == "create") {  // create NAME LIFETIME: create, fill a block, hand it to the pid read from stdin
      unipool::SharedKVBlockPoolOptions o;
      o.block_bytes = 4096;
      o.num_blocks = 256;
      o.pinned = unipool::HostPinned::off;
      o.lifetime = static_cast<unipool::SharedKVLifetime>(std::atoi(argv[3]));
      auto pool = SharedKVBlockPool::create(name, o);
      uint32_t id;
      if (pool->allocate(1, &id) != Status::ok) return 3;
      std::memset(pool->block(id), 0x5a, pool->block_bytes());
      say(std::to_string(id));
      say("ready");
      char line[32] = {};
      if (read(0, line, sizeof line - 1) <= 0) return 6;
      if (pool->hand_over(&id, 1, static_cast<pid_t>(std::atoi(line))) != Status::ok) return 4;
      say("handed");
      wait_for_stdin_eof();
      return 0;
    }
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 5;
  }
  return 2;
}
