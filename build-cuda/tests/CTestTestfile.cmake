# CMake generated Testfile for 
# Source directory: /work/wt-kernels/tests
# Build directory: /work/wt-kernels/build-cuda/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("fakes")
subdirs("core")
subdirs("io")
subdirs("kernels")
