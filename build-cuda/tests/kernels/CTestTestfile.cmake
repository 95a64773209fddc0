# CMake generated Testfile for 
# Source directory: /work/wt-kernels/tests/kernels
# Build directory: /work/wt-kernels/build-cuda/tests/kernels
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/wt-kernels/build-cuda/tests/kernels/kernels_tests[1]_include.cmake")
