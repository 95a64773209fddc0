# CMake generated Testfile for 
# Source directory: /work/wt-kernels/tests/core
# Build directory: /work/wt-kernels/build-cuda/tests/core
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/wt-kernels/build-cuda/tests/core/core_tests[1]_include.cmake")
