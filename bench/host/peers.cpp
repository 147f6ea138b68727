#include "peers.hpp"

#include <unistd.h>

#include <cstdlib>

namespace host_bench {
namespace {

std::string first_existing(const std::vector<std::string>& names) {
  static const char* dirs[] = {"/usr/lib/x86_64-linux-gnu/", "/usr/lib/aarch64-linux-gnu/", "/usr/lib64/",
                               "/usr/lib/", "/usr/local/lib/"};
  for (const auto& n : names) {
    for (const char* d : dirs) {
      const std::string path = std::string(d) + n;
      if (access(path.c_str(), R_OK) == 0) return path;
    }
  }
  return {};
}

Peer make_peer(const std::string& name, std::string path, std::string symbol) {
  Peer p{name, std::move(path), std::move(symbol), "", true, ""};
  if (p.preload.empty() || access(p.preload.c_str(), R_OK) != 0) {
    p.available = false;
    p.missing_reason = "library not found" + (p.preload.empty() ? std::string() : ": " + p.preload);
  }
  return p;
}

std::string pick(const std::map<std::string, std::string>& overrides, const std::string& name, std::string found) {
  const auto it = overrides.find(name);
  return it != overrides.end() ? it->second : found;
}

}  // namespace

const std::vector<std::string>& thread_cache_policies() {
  static const std::vector<std::string> list = {"unlimited", "performance", "size", "none"};
  return list;
}

std::vector<Peer> default_peers(const std::map<std::string, std::string>& overrides) {
  std::vector<Peer> peers;
  peers.push_back({"glibc", "", "", "", true, ""});
  peers.push_back(make_peer("mimalloc", pick(overrides, "mimalloc", first_existing({"libmimalloc.so.2", "libmimalloc.so"})),
                            "mi_malloc"));
  peers.push_back(make_peer("jemalloc", pick(overrides, "jemalloc", first_existing({"libjemalloc.so.2", "libjemalloc.so"})),
                            "mallctl"));
  peers.push_back(make_peer(
      "tcmalloc",
      pick(overrides, "tcmalloc", first_existing({"libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"})),
      "tc_malloc"));
#ifdef UNIPOOL_MALLOC_LIBRARY
  const std::string built = UNIPOOL_MALLOC_LIBRARY;
#else
  const std::string built;
#endif
  peers.push_back(make_peer("unipool", pick(overrides, "unipool", built), "unipool_malloc_face_version"));
  return peers;
}

std::vector<Peer> unipool_policy_peers(const Peer& unipool) {
  std::vector<Peer> out;
  for (const auto& policy : thread_cache_policies()) {
    Peer p = unipool;
    p.name = "unipool:" + policy;
    p.unipool_conf = "thread_cache=" + policy;
    out.push_back(p);
  }
  return out;
}

std::vector<Peer> unipool_variant_peers(const Peer& unipool, const std::map<std::string, std::string>& overrides) {
  std::vector<Peer> out;
  Peer hardened = unipool;
  hardened.name = "unipool:hardened";
  hardened.unipool_conf = "hardened=on";
  out.push_back(hardened);
  for (const auto& [name, path] : overrides) {
    if (name.rfind("unipool@", 0) == 0) out.push_back(make_peer(name, path, unipool.expect_symbol));
  }
  return out;
}

}  // namespace host_bench
