# CMake generated Testfile for 
# Source directory: /work/wt-kernels
# Build directory: /work/wt-kernels/build-cuda
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("core")
subdirs("kernels")
subdirs("io")
subdirs("bench")
subdirs("tests")
