# Shared by the install tests (cmake -P): installs the built ampgrad into WORK_DIR/prefix, then
# configures and builds the project in `project_dir` against it with find_package(ampgrad) into
# WORK_DIR/build. Fails the test on any step.
function(ampgrad_install_and_build project_dir)
  file(REMOVE_RECURSE ${WORK_DIR})
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${project_dir} -B ${WORK_DIR}/build
                          -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "configuring ${project_dir} failed: ${rc}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building ${project_dir} failed: ${rc}")
  endif()
endfunction()
