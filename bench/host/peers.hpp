// host_bench: the allocators compared, and how a child process gets each.
//
// Every allocator runs the same driver binary; all but glibc are put in front
// of glibc's malloc with LD_PRELOAD. unipool's thread-cache policies are
// chosen through UNIPOOL_HOST_CONF in the child's environment.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace host_bench {

struct Peer {
  std::string name;            // "glibc", "mimalloc", ..., "unipool:size"
  std::string preload;         // the .so for LD_PRELOAD; empty for glibc
  std::string expect_symbol;   // defined only when the preload took effect
  std::string unipool_conf;    // UNIPOOL_HOST_CONF, unipool only
  bool available = true;
  std::string missing_reason;
};

// glibc, mimalloc, jemalloc, tcmalloc and unipool, found on this machine.
// `overrides` maps a base name to a library path (from --lib NAME=PATH).
std::vector<Peer> default_peers(const std::map<std::string, std::string>& overrides);

// unipool with each thread-cache policy: "unipool:unlimited", ...
std::vector<Peer> unipool_policy_peers(const Peer& unipool);

// unipool beside itself, run in every workload: "unipool:hardened"
// (UNIPOOL_HOST_CONF=hardened=on), and one "unipool@NAME" per
// `--lib unipool@NAME=PATH` (another build of the face, e.g. the main branch,
// to measure a change in the same run).
std::vector<Peer> unipool_variant_peers(const Peer& unipool, const std::map<std::string, std::string>& overrides);

// The thread-cache policies of the rpmalloc_random study, in report order.
const std::vector<std::string>& thread_cache_policies();

}  // namespace host_bench
