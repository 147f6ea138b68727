#include "malloc/cxx_runtime.hpp"

#include <dlfcn.h>

#include "malloc/fatal.hpp"

namespace unipool::malloc_face {
namespace {

// The first of `names` the process's global scope defines. The face's own
// libstdc++ symbols are local (--exclude-libs), so they are never found.
void* find(const char* const* names) noexcept {
  for (; *names != nullptr; ++names) {
    if (void* symbol = dlsym(RTLD_DEFAULT, *names)) return symbol;
  }
  return nullptr;
}

}  // namespace

std::new_handler program_new_handler() noexcept {
  // libstdc++ and libc++ both declare it in namespace std proper.
  static const char* const kNames[] = {"_ZSt15get_new_handlerv", nullptr};
  using Getter = std::new_handler (*)() noexcept;
  auto getter = reinterpret_cast<Getter>(find(kNames));
  return getter != nullptr ? getter() : nullptr;
}

void throw_program_bad_alloc() {
  // libstdc++'s std::__throw_bad_alloc, then libc++'s std::__1::__throw_bad_alloc.
  static const char* const kNames[] = {"_ZSt17__throw_bad_allocv", "_ZNSt3__117__throw_bad_allocEv", nullptr};
  using Thrower = void (*)();
  auto thrower = reinterpret_cast<Thrower>(find(kNames));
  if (thrower != nullptr) thrower();
  fatal("operator new: out of memory, and no C++ runtime in the process to throw std::bad_alloc with");
}

}  // namespace unipool::malloc_face
