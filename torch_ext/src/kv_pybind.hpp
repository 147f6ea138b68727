// unipool torch extension: what the pybind11 bindings of the KV pools share
// (kv_pool_torch.cpp, shared_kv_torch.cpp): the pool of a Python object,
// its ids, and a refused call as the Python exception.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <vector>

#include "kv_pool_type.hpp"

namespace unipool::torch_ext {

inline std::shared_ptr<KVPool> pool_of(const py::object& obj) {
  auto pool = kv_pool_of(obj.ptr());
  if (!pool) throw py::error_already_set();
  return pool;
}

inline std::vector<int64_t> ids_of(const py::object& obj) {
  std::vector<int64_t> v;
  if (!read_ids(obj.ptr(), v)) throw py::error_already_set();
  return v;
}

// Raises the KV error `s` stands for (raise_kv_error) unless it is ok.
inline void check_kv(Status s) {
  if (s == Status::ok) return;
  raise_kv_error(s);
  throw py::error_already_set();
}

}  // namespace unipool::torch_ext
