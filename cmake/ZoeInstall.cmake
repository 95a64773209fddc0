# find_package(zoe) for C++ users, and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(zoe_libraries zoe_core zoe_allocators zoe_kernels zoe_io zoe_engine)
install(TARGETS ${zoe_libraries} EXPORT zoe-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(module core allocators kernels io engine)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${module}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
install(EXPORT zoe-targets NAMESPACE zoe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zoe-config.cmake.in
  ${PROJECT_BINARY_DIR}/zoe-config.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zoe-config-version.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zoe-config.cmake ${PROJECT_BINARY_DIR}/zoe-config-version.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)

# The libraries are static, so zoe.pc names everything they link privately. With CUDA, zoe_core and
# zoe_kernels link the static CUDA runtime, which needs libdl and librt (and threads: -pthread).
set(ZOE_CUDA_PC_LIBS "")
if(ZOE_WITH_CUDA)
  get_target_property(zoe_cudart_static CUDA::cudart_static IMPORTED_LOCATION)
  get_filename_component(zoe_cudart_dir "${zoe_cudart_static}" DIRECTORY)
  set(ZOE_CUDA_PC_LIBS " -L${zoe_cudart_dir} -lcudart_static -ldl -lrt")
endif()
# The prefix is found from where zoe.pc lies, as zoe-config.cmake finds it, so an install with
# `cmake --install --prefix DIR` (scripts/test) is usable where it lands.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ZOE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH zoe_pc_up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" zoe_pc_up "${zoe_pc_up}")
  set(ZOE_PC_PREFIX "\${pcfiledir}/${zoe_pc_up}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/zoe.pc.in ${PROJECT_BINARY_DIR}/zoe.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/zoe.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
