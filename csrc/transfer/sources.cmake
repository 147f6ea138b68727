# Registration of the pools' memory with a transfer engine
# (include/unipool/registration_cache.hpp), through a caller's Registrar.
list(APPEND UNIPOOL_SOURCES
  transfer/registration_cache.cpp
  transfer/registration_attach.cpp)
