# Cross build for AArch64 Linux with Debian's cross compiler (apt-get install g++-aarch64-linux-gnu;
# the aarch64 C library comes with it under /usr/aarch64-linux-gnu), run under user-mode emulation
# (qemu-user: qemu-aarch64 -L /usr/aarch64-linux-gnu). `cmake --preset aarch64` uses this file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries from the aarch64 tree only; headers and CMake packages from both: what the simulators
# need beyond the C++ library is header-only and architecture-independent (Eigen, whose
# Eigen3Config.cmake lives in /usr/share; Boost.Multiprecision under /usr/include, which the cross
# compiler searches after its own tree).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# ctest and gtest_discover_tests run the test binaries through the emulator.
find_program(ATTNSIM_QEMU_AARCH64 qemu-aarch64)
if(ATTNSIM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ATTNSIM_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
