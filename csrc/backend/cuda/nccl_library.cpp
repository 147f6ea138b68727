#include "backend/cuda/nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace unipool::backend::cuda {

namespace {

constexpr const char* kDefaultSoname = "libnccl.so.2";

std::string dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

// Fills `lib` from `handle` (or RTLD_DEFAULT); false if a symbol is missing.
bool bind(void* handle, NcclLibrary& lib) {
  lib.mem_alloc = reinterpret_cast<decltype(lib.mem_alloc)>(dlsym(handle, "ncclMemAlloc"));
  lib.mem_free = reinterpret_cast<decltype(lib.mem_free)>(dlsym(handle, "ncclMemFree"));
  lib.get_error_string = reinterpret_cast<decltype(lib.get_error_string)>(dlsym(handle, "ncclGetErrorString"));
  return lib.mem_alloc != nullptr && lib.mem_free != nullptr && lib.get_error_string != nullptr;
}

NcclLibrary open(const char* name, const std::string& how_to_fix) {
  NcclLibrary lib;
  lib.origin = name;
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    lib.unavailable = "unipool nccl: cannot load " + std::string(name) + " (" + dl_error() + ")" + how_to_fix;
  } else if (!bind(handle, lib)) {
    lib = NcclLibrary{};
    lib.origin = name;
    lib.unavailable = "unipool nccl: " + std::string(name) + " lacks ncclMemAlloc / ncclMemFree (NCCL 2.19 or later is needed)";
  }
  return lib;
}

}  // namespace

NcclLibrary NcclLibrary::load() {
  if (const char* path = std::getenv("UNIPOOL_NCCL_LIBRARY"); path != nullptr && *path != '\0') {
    return open(path, " from UNIPOOL_NCCL_LIBRARY");
  }
  NcclLibrary in_process;
  if (bind(RTLD_DEFAULT, in_process)) {
    in_process.origin = "the process";
    return in_process;
  }
  return open(kDefaultSoname, "; install NCCL 2.19 or later, or set UNIPOOL_NCCL_LIBRARY");
}

}  // namespace unipool::backend::cuda
