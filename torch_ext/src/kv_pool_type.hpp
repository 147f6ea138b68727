// unipool torch extension: unipool._C._KVCore, the CPython type behind
// unipool.KVBlockPool. Its alloc/free are plain CPython methods (vectorcall,
// no binding layer), so a batched call costs little more than an empty one.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "unipool/kv_block_pool.hpp"
#include "unipool/kv_pool.hpp"

namespace unipool::torch_ext {

// The pool of a _KVCore (or subclass) object, a KVBlockPool or a
// SharedKVBlockPool; raises and returns nullptr if `obj` is not one or is not
// initialised.
std::shared_ptr<KVPool> kv_pool_of(PyObject* obj);
// Makes `pool` the pool of `obj`, a _KVCore (or subclass) object.
void set_kv_pool(PyObject* obj, std::shared_ptr<KVPool> pool);
// Adds _KVCore, KVPoolExhaustedError and KVDoubleFreeError to the module.
bool add_kv_core_type(PyObject* module);
// Adds EmptyMethods (an empty vectorcall method, a benchmark reference) to
// the module unipool._testing.
bool add_empty_methods_type(PyObject* module);
// Reads block ids (1-D int64/int32 CPU tensor, list or tuple of ints) into v.
bool read_ids(PyObject* ids, std::vector<int64_t>& v);
// Raises the KV pool error that `s` stands for, with last_error().
void raise_kv_error(Status s);

}  // namespace unipool::torch_ext
