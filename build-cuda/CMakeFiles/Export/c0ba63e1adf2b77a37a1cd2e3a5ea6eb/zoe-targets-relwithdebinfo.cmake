#----------------------------------------------------------------
# Generated CMake target import file for configuration "RelWithDebInfo".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "zoe::core" for configuration "RelWithDebInfo"
set_property(TARGET zoe::core APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(zoe::core PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "CXX"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libzoe_core.a"
  )

list(APPEND _cmake_import_check_targets zoe::core )
list(APPEND _cmake_import_check_files_for_zoe::core "${_IMPORT_PREFIX}/lib/libzoe_core.a" )

# Import target "zoe::kernels" for configuration "RelWithDebInfo"
set_property(TARGET zoe::kernels APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(zoe::kernels PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "CUDA;CXX"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libzoe_kernels.a"
  )

list(APPEND _cmake_import_check_targets zoe::kernels )
list(APPEND _cmake_import_check_files_for_zoe::kernels "${_IMPORT_PREFIX}/lib/libzoe_kernels.a" )

# Import target "zoe::io" for configuration "RelWithDebInfo"
set_property(TARGET zoe::io APPEND PROPERTY IMPORTED_CONFIGURATIONS RELWITHDEBINFO)
set_target_properties(zoe::io PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELWITHDEBINFO "CXX"
  IMPORTED_LOCATION_RELWITHDEBINFO "${_IMPORT_PREFIX}/lib/libzoe_io.a"
  )

list(APPEND _cmake_import_check_targets zoe::io )
list(APPEND _cmake_import_check_files_for_zoe::io "${_IMPORT_PREFIX}/lib/libzoe_io.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
