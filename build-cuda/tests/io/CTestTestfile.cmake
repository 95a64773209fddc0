# CMake generated Testfile for 
# Source directory: /work/wt-kernels/tests/io
# Build directory: /work/wt-kernels/build-cuda/tests/io
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/wt-kernels/build-cuda/tests/io/io_tests[1]_include.cmake")
