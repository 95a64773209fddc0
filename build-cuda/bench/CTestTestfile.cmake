# CMake generated Testfile for 
# Source directory: /work/wt-kernels/bench
# Build directory: /work/wt-kernels/build-cuda/bench
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
