# Installs the libraries, headers and an exported CMake package, so that
#   find_package(unipool CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE unipool::unipool)   # or unipool::unipool_static
# works from another project.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(UNIPOOL_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/unipool)
install(TARGETS unipool unipool_static EXPORT unipoolTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/unipool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT unipoolTargets NAMESPACE unipool:: DESTINATION ${UNIPOOL_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/unipoolConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/unipoolConfig.cmake
  INSTALL_DESTINATION ${UNIPOOL_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/unipoolConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/unipoolConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/unipoolConfigVersion.cmake
        DESTINATION ${UNIPOOL_INSTALL_CMAKEDIR})
