# find_package(zoe) for C++ users, and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(zoe_libraries zoe_core zoe_allocators zoe_kernels zoe_io)
install(TARGETS ${zoe_libraries} EXPORT zoe-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(module core allocators kernels io)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${module}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT zoe-targets NAMESPACE zoe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zoe-config.cmake.in
  ${PROJECT_BINARY_DIR}/zoe-config.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zoe-config-version.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zoe-config.cmake ${PROJECT_BINARY_DIR}/zoe-config-version.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)

configure_file(${PROJECT_SOURCE_DIR}/cmake/zoe.pc.in ${PROJECT_BINARY_DIR}/zoe.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/zoe.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
