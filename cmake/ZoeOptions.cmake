# Build options. CUDA is switched on by default exactly when a CUDA compiler is found, so the
# same command line builds the CUDA targets here (compile only) and skips them where nvcc is absent.
# ZOE_REQUIRE_CUDA turns that skip into an error: CI sets it, because a build that quietly drops
# CUDA also hides every CUDA compile error.
include(CheckLanguage)
# check_language caches a miss as NOTFOUND and never looks again; look again on every configure, so
# a build folder set up before the toolkit was installed (or put on PATH) finds it.
if(NOT CMAKE_CUDA_COMPILER)
  unset(CMAKE_CUDA_COMPILER CACHE)
endif()
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(zoe_cuda_default ON)
else()
  set(zoe_cuda_default OFF)
endif()

option(ZOE_WITH_CUDA "Build the CUDA device and kernels (compile only without a GPU)" ${zoe_cuda_default})
option(ZOE_REQUIRE_CUDA "Fail to configure unless the CUDA targets are built (CI)" OFF)
option(ZOE_WITH_LIBURING "Build the io_uring I/O backend" ON)
option(ZOE_WITH_LIBAIO "Build the libaio I/O backend" ON)
option(ZOE_BUILD_TESTS "Build the GoogleTest suites" ON)
option(ZOE_BUILD_BENCH "Build zoe-bench and the micro-benchmarks" ON)
option(ZOE_WARNINGS_AS_ERRORS "Treat compiler warnings as errors (CI)" OFF)
# GoogleTest's and GoogleMock's headers cost ~3 s of CPU in every test unit (a unit of them and one
# TEST: 4.8 s, 1.6 s with them precompiled). Off by default: ccache caches no unit that uses a
# precompiled header, so incremental builds with a warm cache are faster without. scripts/test
# (fresh CI machines) turns it on.
option(ZOE_TEST_PCH "Precompile the GoogleTest/GoogleMock headers once for every test binary" OFF)
set(ZOE_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined or thread")
# The libFuzzer targets of fuzz/ need clang; build them with
# ZOE_SANITIZE=fuzzer-no-link,address,undefined so the libraries they drive report coverage.
# Their entry functions (fuzz/entries) are built whenever tests are: the regression cases use them.
option(ZOE_BUILD_FUZZERS "Build the libFuzzer targets of fuzz/ (clang only)" OFF)

if(ZOE_REQUIRE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR
      "ZOE_REQUIRE_CUDA=ON but no CUDA compiler was found: nvcc is not on PATH and neither CUDACXX "
      "nor CUDA_PATH names one. Put the toolkit's bin folder on PATH (e.g. /usr/local/cuda/bin) or set "
      "CUDACXX=/path/to/nvcc. (Debian 12's own nvidia-cuda-toolkit is CUDA 11.8, too old for C++20 device "
      "code; install NVIDIA's toolkit, 12 or later.)")
  endif()
  if(NOT ZOE_WITH_CUDA)
    message(FATAL_ERROR "ZOE_REQUIRE_CUDA=ON contradicts ZOE_WITH_CUDA=OFF (the cache of ${CMAKE_BINARY_DIR} "
                        "may hold OFF from an earlier configure): pass -DZOE_WITH_CUDA=ON")
  endif()
endif()

if(ZOE_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 predates nvcc's C++20 flag; without it, C++20 targets with CUDA sources fail to generate.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  message(STATUS "zoe: CUDA compiler ${CMAKE_CUDA_COMPILER} (${CMAKE_CUDA_COMPILER_VERSION})")
elseif(CMAKE_CUDA_COMPILER)
  message(STATUS "zoe: CUDA targets skipped: ZOE_WITH_CUDA=OFF although ${CMAKE_CUDA_COMPILER} was found")
else()
  message(STATUS "zoe: CUDA targets skipped: no CUDA compiler (nvcc) on PATH")
endif()
message(STATUS "zoe: CUDA ${ZOE_WITH_CUDA} (architectures ${CMAKE_CUDA_ARCHITECTURES}), "
               "sanitizers '${ZOE_SANITIZE}', tests ${ZOE_BUILD_TESTS}, bench ${ZOE_BUILD_BENCH}")
