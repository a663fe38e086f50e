# Installs the built ampgrad into a scratch prefix, builds examples/ against it with
# find_package(ampgrad), and runs each example briefly (on the CPU unless a GPU is there), and
# `ampgrad ops --load` on the custom op's plugin.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/build
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the examples failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the examples failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/custom_op RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "examples/custom_op failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/prefix/bin/ampgrad ops --load ${WORK_DIR}/build/libcustom_op_plugin.so
                OUTPUT_VARIABLE ops RESULT_VARIABLE rc)
if(rc OR NOT ops MATCHES "swish +fp32")
  message(FATAL_ERROR "ampgrad ops --load did not list the plugin's swish (rc ${rc}):\n${ops}")
endif()
message(STATUS "ampgrad ops --load lists the plugin's op:")
string(REGEX MATCH "swish[^\n]*" line "${ops}")
message(STATUS "${line}")
