# find_package(zoe) for C and C++ users, and pkg-config files: zoe.pc for the static C++ libraries,
# zoe-c.pc for the C API (libzoe_c.so).
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

# The C API: a shared library that carries the static C++ libraries inside it and exports only zoe_*
# (tests/ci checks the file), so a C user links -lzoe_c and nothing else. Its own export set, so that
# find_package(zoe COMPONENTS c) loads it without the C++ libraries' build dependencies (hwy, TBB,
# hwloc headers): the .so names its runtime libraries itself (DT_NEEDED).
if(TARGET zoe_c)
  # While the major version is 0 a minor release may change the ABI, so the SONAME carries
  # major.minor (libzoe_c.so.0.1), as zoe-config-version.cmake accepts only the same minor version.
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(zoe_c_soversion ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  else()
    set(zoe_c_soversion ${PROJECT_VERSION_MAJOR})
  endif()
  set_target_properties(zoe_c PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${zoe_c_soversion})
  install(TARGETS zoe_c EXPORT zoe-c-targets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/bindings/include/zoe/zoe.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zoe)
  install(EXPORT zoe-c-targets NAMESPACE zoe:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/zoe)
endif()

# Programs linked with libzoe_c.so find it beside them once installed (bin/../lib), wherever the
# prefix lands, without LD_LIBRARY_PATH; with CUDA they also find cudart and cuBLAS in the
# toolkit's folder, which the loader's path may lack. (Not every linked folder: OpenBLAS stays
# Debian's alternatives' choice.)
file(RELATIVE_PATH zoe_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set(zoe_program_rpath "$ORIGIN/${zoe_bin_to_lib}")
if(ZOE_WITH_CUDA)
  list(APPEND zoe_program_rpath ${CUDAToolkit_LIBRARY_DIR})
endif()
foreach(program zoe-train-mlp)
  if(TARGET ${program})
    set_target_properties(${program} PROPERTIES INSTALL_RPATH "${zoe_program_rpath}")
  endif()
endforeach()

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
# zoe_engine's mpi backend links MPI's C library (its full path, as FindMPI gives it).
set(ZOE_MPI_PC_LIBS "")
foreach(zoe_mpi_lib IN LISTS MPI_C_LIBRARIES)
  string(APPEND ZOE_MPI_PC_LIBS " ${zoe_mpi_lib}")
endforeach()
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
# zoe-c.pc: -lzoe_c alone (the shared library brings its own dependencies). It is not on the
# default library path when installed under a prefix of one's own: link with
# -Wl,-rpath,$(pkg-config --variable=libdir zoe-c), as scripts/test does.
if(TARGET zoe_c)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/zoe-c.pc.in ${PROJECT_BINARY_DIR}/zoe-c.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/zoe-c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
