#include "malloc/cxx_runtime.hpp"

#include <dlfcn.h>

#include <exception>

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

#if defined(__GLIBCXX__)
// The face's own, hidden copy of libstdc++ calls this when the face's code
// ends in std::terminate: an exception escaping it (nothing in the program
// could catch it: see cxx_runtime.hpp), or a pure virtual call and the like.
// libstdc++'s own version prints the exception's
// demangled type name, and with it the face carried the demangler: some 50
// KiB of code and 222 of its 455 relative relocations, which the loader applied in
// every preloaded process (a preloaded /bin/true took 1-2% longer to
// start). Defined here, libstdc++'s version is not linked in.
void __gnu_cxx::__verbose_terminate_handler() {
  unipool::malloc_face::fatal("terminate called inside the allocator's own code");
}
#endif
