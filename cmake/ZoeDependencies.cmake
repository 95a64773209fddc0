# Third-party packages, all from Debian (scripts/setup installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# The mpi communicator backend (Debian: libopenmpi-dev; mpirun from openmpi-bin runs the mpi tests).
find_package(MPI REQUIRED COMPONENTS C)

if(ZOE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# The io_uring and libaio backends are built when their option is on and the library is found;
# the factory learns which through ZOE_HAVE_URING / ZOE_HAVE_AIO. A missing library is a warning,
# not an error: the build then has fewer backends and "auto" picks among the rest.
set(ZOE_HAVE_URING OFF)
if(ZOE_WITH_LIBURING)
  pkg_check_modules(LIBURING QUIET liburing)
  if(LIBURING_FOUND)
    set(ZOE_HAVE_URING ON)
  else()
    message(WARNING "ZOE_WITH_LIBURING is ON but pkg-config cannot find liburing (Debian: liburing-dev); "
                    "building without the uring backend")
  endif()
endif()
set(ZOE_HAVE_AIO OFF)
if(ZOE_WITH_LIBAIO)
  find_library(ZOE_LIBAIO_LIBRARY NAMES aio)
  find_path(ZOE_LIBAIO_INCLUDE_DIR NAMES libaio.h)
  if(ZOE_LIBAIO_LIBRARY AND ZOE_LIBAIO_INCLUDE_DIR)
    set(ZOE_HAVE_AIO ON)
  else()
    message(WARNING "ZOE_WITH_LIBAIO is ON but libaio was not found (Debian: libaio-dev); "
                    "building without the aio backend")
  endif()
endif()
message(STATUS "zoe: I/O backends uring ${ZOE_HAVE_URING}, aio ${ZOE_HAVE_AIO}, posix ON")
