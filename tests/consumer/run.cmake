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
# The umbrella header gives the public API, not the internals: none of these is declared by
# what <ampgrad/ampgrad.h> pulls in.
set(defs)
if(WITH_CUDA)
  set(defs -DAMPGRAD_WITH_CUDA=1)
endif()
file(WRITE ${WORK_DIR}/umbrella.cpp "#include <ampgrad/ampgrad.h>\n")
execute_process(COMMAND ${CXX_COMPILER} -std=c++20 -E ${defs} -I${WORK_DIR}/prefix/include ${WORK_DIR}/umbrella.cpp
                OUTPUT_VARIABLE pre RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "preprocessing <ampgrad/ampgrad.h> failed: ${err}")
endif()
foreach(internal "class FunctionNode" "class CallKey" "void run_call(" "to_reusing(" "apply_policy("
                 "current_working_copy(" "void submit_launches(" "set_backward_context_factory("
                 "set_cast_reuse(")
  string(FIND "${pre}" "${internal}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "<ampgrad/ampgrad.h> declares an internal: '${internal}'")
  endif()
endforeach()
