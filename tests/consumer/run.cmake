# Installs the built ampgrad into a scratch prefix, then configures, builds and runs the consumer.
include(${CMAKE_CURRENT_LIST_DIR}/../install_build.cmake)
ampgrad_install_and_build(${SOURCE_DIR}/tests/consumer)
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer ran but gave a wrong answer: ${rc}")
endif()
# Only the prefix's include/ is on a consumer's path (not include/ampgrad).
file(GLOB_RECURSE targets ${WORK_DIR}/prefix/*/ampgradTargets.cmake)
file(READ "${targets}" exported)
string(REGEX MATCH "INTERFACE_INCLUDE_DIRECTORIES \"[^\"]*\"" dirs "${exported}")
if(NOT dirs STREQUAL "INTERFACE_INCLUDE_DIRECTORIES \"\${_IMPORT_PREFIX}/include\"")
  message(FATAL_ERROR "the exported target's include path is ${dirs}, expected only <prefix>/include")
endif()
