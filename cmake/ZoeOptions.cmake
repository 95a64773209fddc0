# Build options. CUDA is switched on by default exactly when a CUDA compiler is found, so the
# same command line builds the CUDA targets here (compile only) and skips them where nvcc is absent.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(zoe_cuda_default ON)
else()
  set(zoe_cuda_default OFF)
endif()

option(ZOE_WITH_CUDA "Build the CUDA device and kernels (compile only without a GPU)" ${zoe_cuda_default})
option(ZOE_WITH_NCCL "Build the NCCL communicator (needs ZOE_WITH_CUDA)" ${zoe_cuda_default})
option(ZOE_WITH_MPI "Build the MPI communicator" ON)
option(ZOE_WITH_LIBURING "Build the io_uring I/O backend" ON)
option(ZOE_WITH_LIBAIO "Build the libaio I/O backend" ON)
option(ZOE_BUILD_TESTS "Build the GoogleTest suites" ON)
option(ZOE_BUILD_BENCH "Build zoe-bench and the micro-benchmarks" ON)
option(ZOE_WARNINGS_AS_ERRORS "Treat compiler warnings as errors (CI)" OFF)
set(ZOE_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined or thread")

if(ZOE_WITH_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
if(ZOE_WITH_NCCL AND NOT ZOE_WITH_CUDA)
  message(FATAL_ERROR "ZOE_WITH_NCCL=ON needs ZOE_WITH_CUDA=ON")
endif()
message(STATUS "zoe: CUDA ${ZOE_WITH_CUDA} (architectures ${CMAKE_CUDA_ARCHITECTURES}), "
               "sanitizers '${ZOE_SANITIZE}', tests ${ZOE_BUILD_TESTS}, bench ${ZOE_BUILD_BENCH}")
