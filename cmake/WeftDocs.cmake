# SPDX-License-Identifier: Apache-2.0
# The API reference (Doxygen, from include/weft/) and the programs' man
# pages (help2man, from their --help and --version), built with the rest
# and installed under share/doc/weft/html and share/man/man1.
# tests/check_api_docs.sh fails on any undocumented public declaration.

find_package(Doxygen QUIET)
find_package(Python3 COMPONENTS Interpreter QUIET)
find_program(HELP2MAN_EXECUTABLE help2man)

set(WEFT_DOXYGEN_OUT ${PROJECT_BINARY_DIR}/docs/api)
configure_file(${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in
               ${WEFT_DOXYGEN_OUT}/Doxyfile @ONLY)

# weft_man_page(TARGET "what it is"): man1/TARGET.1 from the program's
# --help and --version, installed beside the program (the top
# CMakeLists.txt calls it for the installed programs, with WEFT_BUILD_DOCS).
function(weft_man_page target what)
  set(page ${PROJECT_BINARY_DIR}/man/${target}.1)
  add_custom_command(OUTPUT ${page}
    COMMAND ${PROJECT_SOURCE_DIR}/cmake/help2man.sh ${HELP2MAN_EXECUTABLE}
            $<TARGET_FILE:${target}> ${what} ${page}
    DEPENDS ${target} ${PROJECT_SOURCE_DIR}/cmake/help2man.sh
    COMMENT "Man page ${target}.1 (help2man)"
    VERBATIM)
  add_custom_target(${target}_man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endfunction()

if(NOT WEFT_BUILD_DOCS)
  return()
endif()
if(NOT DOXYGEN_FOUND OR NOT Python3_Interpreter_FOUND OR
   NOT HELP2MAN_EXECUTABLE)
  message(WARNING "No API reference and no man pages: they need doxygen, "
          "python3 and help2man (scripts/deps.sh installs them)")
  return()
endif()

file(GLOB weft_public_headers ${PROJECT_SOURCE_DIR}/include/weft/*.h)
add_custom_command(OUTPUT ${WEFT_DOXYGEN_OUT}/html/index.html
  COMMAND ${DOXYGEN_EXECUTABLE} ${WEFT_DOXYGEN_OUT}/Doxyfile
  DEPENDS ${weft_public_headers} ${WEFT_DOXYGEN_OUT}/Doxyfile
          ${PROJECT_BINARY_DIR}/include/weft/version.h
          ${PROJECT_SOURCE_DIR}/docs/api/filter.py
          ${PROJECT_SOURCE_DIR}/docs/api/mainpage.md
  COMMENT "API reference (Doxygen): ${WEFT_DOXYGEN_OUT}/html/index.html"
  VERBATIM)
add_custom_target(weft_api_docs ALL
  DEPENDS ${WEFT_DOXYGEN_OUT}/html/index.html)
install(DIRECTORY ${WEFT_DOXYGEN_OUT}/html/
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/html)

