# SPDX-License-Identifier: Apache-2.0
# What a sample that is a CMake project of its own (samples/kv, samples/http,
# samples/bench) does before its targets, from its project() on: it uses
# weft only as a user does, through weft::weft, libweft.so, which exports
# weft_* and hides weft's internals (weft__*, cmake/weft.map), so a call of
# an internal fails the link; check_public_api.sh checks the rest.
#   Built alone (cmake -S samples/NAME): an installed weft
#     (find_package(weft)), the C standard and warnings weft builds with
#     (cmake/WeftCFlags.cmake),
#     options WEFT_SAMPLE_WERROR and WEFT_SAMPLE_BUILD_TESTS (default ON).
#   From weft's top level: the build tree's weft::weft, weft's own flags
#     (weft_flags: -Werror, sanitizers) and WEFT_BUILD_TESTS.
# Either way it defines weft_sample_flags (link it PRIVATE), and sets
# WEFT_SAMPLE_BUILD_TESTS and WEFT_SAMPLE_WEFT_SOURCE_DIR: the weft tree
# the sample sits in, for the test harness (tests/harness.c, itself on the
# public API only), tests/tls/make-certs.sh and check_public_api.sh.
if(NOT TARGET weft::weft) # built alone
  find_package(weft 0.2 REQUIRED)
  get_filename_component(WEFT_SAMPLE_WEFT_SOURCE_DIR
                         ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
  include(${WEFT_SAMPLE_WEFT_SOURCE_DIR}/cmake/WeftCFlags.cmake)
  weft_c_defaults()
  include(GNUInstallDirs)
  find_package(PkgConfig REQUIRED)
  option(WEFT_SAMPLE_WERROR "Treat compiler warnings as errors" OFF)
  option(WEFT_SAMPLE_BUILD_TESTS "Build the sample's tests" ON)
  add_library(weft_sample_flags INTERFACE)
  weft_c_flags(weft_sample_flags "${WEFT_SAMPLE_WERROR}")
  if(WEFT_SAMPLE_BUILD_TESTS)
    enable_testing()
  endif()
else() # from weft's top level
  set(WEFT_SAMPLE_WEFT_SOURCE_DIR ${CMAKE_SOURCE_DIR})
  if(NOT TARGET weft_sample_flags)
    add_library(weft_sample_flags INTERFACE)
    target_link_libraries(weft_sample_flags INTERFACE weft_flags)
  endif()
  set(WEFT_SAMPLE_BUILD_TESTS ${WEFT_BUILD_TESTS})
endif()
# The installed programs link libweft.so, so they must find it wherever
# the prefix is (an install to $HOME/.local is not on ld.so's path): in
# ../lib beside them (weft's own install), or where the installed weft was
# found (built alone: the link directories outside the build tree).
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
