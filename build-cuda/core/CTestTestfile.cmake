# CMake generated Testfile for 
# Source directory: /work/wt-kernels/core
# Build directory: /work/wt-kernels/build-cuda/core
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
