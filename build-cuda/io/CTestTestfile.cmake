# CMake generated Testfile for 
# Source directory: /work/wt-kernels/io
# Build directory: /work/wt-kernels/build-cuda/io
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
