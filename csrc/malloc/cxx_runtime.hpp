// unipool malloc face: the program's C++ runtime, seen from operator new.
//
// The face links libstdc++ and libgcc statically and keeps them hidden, so
// that preloading it into a C program (/bin/true, sh, git) does not load
// libstdc++.so: that alone would double a short process's start-up time.
// The face's own copy of the C++ runtime must then never meet the
// program's: a std::bad_alloc the face made would not be the type the
// program's catch clauses name, nor unwound by the program's unwinder. So
// what operator new hands to the program comes from the program's runtime,
// looked up by name (dlsym) on the failure path only:
//   - the new-handler it installed with std::set_new_handler;
//   - std::bad_alloc, thrown by its std::__throw_bad_alloc.
// The nothrow forms are not defined by the face: the runtime's own call the
// throwing form inside their try block, so a throwing handler still ends in
// nullptr.
#pragma once

#include <new>

namespace unipool::malloc_face {

// The program's current new-handler; nullptr when none is set (or no C++
// runtime is in the process).
std::new_handler program_new_handler() noexcept;

// Throws the program's std::bad_alloc. Without a C++ runtime in the process
// (nothing could catch it) the face ends the process with a message.
[[noreturn]] void throw_program_bad_alloc();

}  // namespace unipool::malloc_face
