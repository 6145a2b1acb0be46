# SPDX-License-Identifier: Apache-2.0
# weft_c_defaults(): C17 without compiler extensions, and RelWithDebInfo
# unless a build type is given: for weft's top level and for a sample
# built alone (samples/weft_sample.cmake). A macro: it sets the caller's
# variables.
macro(weft_c_defaults)
  set(CMAKE_C_STANDARD 17)
  set(CMAKE_C_STANDARD_REQUIRED ON)
  set(CMAKE_C_EXTENSIONS OFF)
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
  endif()
endmacro()

# weft_c_flags(TARGET WERROR): puts the warnings and definitions weft's C
# is built with on the INTERFACE target TARGET, -Werror too when WERROR is
# true. Used for weft's own weft_flags and by a sample built alone
# (samples/weft_sample.cmake), so both compile alike.
function(weft_c_flags target werror)
  target_compile_options(${target} INTERFACE -Wall -Wextra -Wshadow
    -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter)
  target_compile_definitions(${target} INTERFACE _GNU_SOURCE)
  if(werror)
    target_compile_options(${target} INTERFACE -Werror)
  endif()
endfunction()
