# Cross-compiling kvstash for 64-bit ARM Linux with Debian's cross compiler (g++-aarch64-linux-gnu) and the arm64
# builds of the libraries it links (multiarch: `apt-get install libzstd-dev:arm64 ...`, see scripts/setup.sh).
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# Multiarch puts the arm64 headers and libraries beside the host's (/usr/include/aarch64-linux-gnu,
# /usr/lib/aarch64-linux-gnu), where Debian's cross g++ already looks; pkg-config is pointed there below. The tests
# run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR: ctest and gtest_discover_tests prefix every test binary with it).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(KVSTASH_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${KVSTASH_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${KVSTASH_TRIPLE}-g++)

# The arm64 .pc files only (not the host's): Debian's multiarch pkg-config directories.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${KVSTASH_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Libraries and headers from the target's directories; programs (pkg-config, python) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${KVSTASH_TRIPLE} /usr/lib/${KVSTASH_TRIPLE})
set(CMAKE_LIBRARY_ARCHITECTURE ${KVSTASH_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# qemu-user runs the test binaries. Their loader and libc must come from one glibc build: multiarch's libc6:arm64
# (pulled in by the :arm64 packages) puts its loader at /lib/ld-linux-aarch64.so.1, where qemu finds it without -L.
# Mixing it with the cross compiler's copy (-L /usr/aarch64-linux-gnu: libc6-arm64-cross, another build) hangs the
# first pthread_create (the two disagree on the loader's data layout), so -L is used only without multiarch.
# -cpu max: every extension qemu emulates (NEON dot product included), so run-time feature checks see them.
find_program(KVSTASH_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(KVSTASH_QEMU_AARCH64 AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${KVSTASH_QEMU_AARCH64} -cpu max)
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${KVSTASH_QEMU_AARCH64} -L /usr/${KVSTASH_TRIPLE} -cpu max)
  endif()
endif()
