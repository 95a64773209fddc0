# CMake generated Testfile for 
# Source directory: /work/wt-kernels/tests/fakes
# Build directory: /work/wt-kernels/build-cuda/tests/fakes
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
