// unipool torch extension: the calls only a SharedKVBlockPool has (creating
// and attaching by name, hand-overs, reclaiming dead members). Everything
// else goes through the _KVCore type, as for KVBlockPool.
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "kv_pybind.hpp"
#include "unipool/shared_kv_block_pool.hpp"

namespace unipool::torch_ext {
namespace {

HostPinned pinned_of(int pinned) {
  return pinned < 0 ? HostPinned::best_effort : pinned ? HostPinned::on : HostPinned::off;
}

SharedKVLifetime lifetime_of(const std::string& lifetime) {
  if (lifetime == "while_attached") return SharedKVLifetime::while_attached;
  if (lifetime == "creator") return SharedKVLifetime::creator;
  throw py::value_error("SharedKVBlockPool: lifetime must be 'while_attached' or 'creator', got '" + lifetime + "'");
}

SharedKVBlockPool& shared_of(const py::object& obj) {
  const std::shared_ptr<KVPool> pool = pool_of(obj);
  auto* shared = dynamic_cast<SharedKVBlockPool*>(pool.get());
  if (!shared) throw py::type_error("expected a unipool.SharedKVBlockPool");
  return *shared;  // obj keeps it alive for the call
}

void create(const py::object& core, const std::string& name, uint64_t block_bytes, uint64_t num_blocks, int pinned,
            int numa_node, uint64_t alignment, const std::string& lifetime, uint32_t max_members) {
  SharedKVBlockPoolOptions o;
  o.block_bytes = block_bytes;
  o.num_blocks = num_blocks;
  o.alignment = alignment;
  o.pinned = pinned_of(pinned);
  o.numa_node = numa_node;
  o.lifetime = lifetime_of(lifetime);
  o.max_members = max_members;
  set_kv_pool(core.ptr(), SharedKVBlockPool::create(name, o));
}

void attach(const py::object& core, const std::string& name, int pinned, uint64_t block_bytes, uint64_t num_blocks) {
  SharedKVAttachOptions o;
  o.pinned = pinned_of(pinned);
  o.block_bytes = block_bytes;
  o.num_blocks = num_blocks;
  set_kv_pool(core.ptr(), SharedKVBlockPool::attach(name, o));
}

py::dict shared_stats(const py::object& core) {
  const SharedKVBlockPoolStats s = shared_of(core).stats();
  py::dict d;
  d["transit_blocks"] = s.transit_blocks;
  d["reclaimed_blocks"] = s.reclaimed_blocks;
  d["owned_blocks"] = s.owned_blocks;
  d["members"] = s.members;
  d["dead_members"] = s.dead_members;
  d["recoveries"] = s.recoveries;
  return d;
}

}  // namespace

void bind_shared_kv_pool(py::module_& m) {
  m.def("_kv_create_shared", &create);
  m.def("_kv_attach_shared", &attach);
  m.def("_kv_shared_name", [](const py::object& core) { return shared_of(core).name(); });
  m.def("_kv_hand_over", [](const py::object& core, const py::object& ids, int pid) {
    const std::vector<int64_t> v = ids_of(ids);
    check_kv(shared_of(core).hand_over(v.data(), v.size(), static_cast<pid_t>(pid)));
  });
  m.def("_kv_take_over", [](const py::object& core, const py::object& ids) {
    const std::vector<int64_t> v = ids_of(ids);
    check_kv(shared_of(core).take_over(v.data(), v.size()));
  });
  m.def("_kv_handed_to_me", [](const py::object& core) {
    const std::vector<uint32_t> ids = shared_of(core).handed_to_me();
    return std::vector<int64_t>(ids.begin(), ids.end());
  });
  m.def("_kv_reclaim_dead", [](const py::object& core) { return shared_of(core).reclaim_dead(); });
  m.def("_kv_owner_of",
        [](const py::object& core, uint64_t id) { return static_cast<int>(shared_of(core).owner_of(id)); });
  m.def("_kv_member_pids", [](const py::object& core) {
    const std::vector<pid_t> pids = shared_of(core).member_pids();
    return std::vector<int>(pids.begin(), pids.end());
  });
  m.def("_kv_closed", [](const py::object& core) { return shared_of(core).closed(); });
  m.def("_kv_shared_stats", &shared_stats);
}

}  // namespace unipool::torch_ext
