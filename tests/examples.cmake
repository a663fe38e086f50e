# Builds examples/ against the installed package (find_package(ampgrad)) and runs each example
# briefly (on the CPU unless a GPU is there), and `ampgrad ops --load` on the custom op's plugin.
include(${CMAKE_CURRENT_LIST_DIR}/install_build.cmake)
ampgrad_install_and_build(${SOURCE_DIR}/examples)
execute_process(COMMAND ${WORK_DIR}/build/custom_op RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "examples/custom_op failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/prefix/bin/ampgrad ops --load ${WORK_DIR}/build/libcustom_op_plugin.so
                OUTPUT_VARIABLE ops RESULT_VARIABLE rc)
if(rc OR NOT ops MATCHES "swish +fp32")
  message(FATAL_ERROR "ampgrad ops --load did not list the plugin's swish (rc ${rc}):\n${ops}")
endif()
string(REGEX MATCH "swish[^\n]*" line "${ops}")
message(STATUS "ampgrad ops --load lists the plugin's op: ${line}")
