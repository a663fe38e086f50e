# Installs the built ampgrad into a scratch prefix, then configures, builds and runs the consumer.
include(${CMAKE_CURRENT_LIST_DIR}/../install_build.cmake)
ampgrad_install_and_build(${SOURCE_DIR}/tests/consumer)
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer ran but gave a wrong answer: ${rc}")
endif()
