# docs/guide.md's C++ snippets, compiled against the installed package and run: each ```cpp
# block becomes the body of a function of one program (scripts/guide_snippets.py).
include(${CMAKE_CURRENT_LIST_DIR}/install_build.cmake)
set(project ${WORK_DIR}_src)
file(REMOVE_RECURSE ${project})
file(MAKE_DIRECTORY ${project})
execute_process(COMMAND ${PYTHON} ${SOURCE_DIR}/scripts/guide_snippets.py ${SOURCE_DIR}/docs/guide.md
                        ${project}/guide_snippets.cpp RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "extracting docs/guide.md's snippets failed: ${rc}")
endif()
file(WRITE ${project}/CMakeLists.txt
     "cmake_minimum_required(VERSION 3.24)\nproject(guide_snippets LANGUAGES CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
     "find_package(ampgrad REQUIRED)\nadd_executable(guide_snippets guide_snippets.cpp)\n"
     "target_link_libraries(guide_snippets PRIVATE ampgrad::ampgrad)\n")
ampgrad_install_and_build(${project})
execute_process(COMMAND ${WORK_DIR}/build/guide_snippets WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "docs/guide.md's snippets failed (${rc}):\n${out}\n${err}\n(the program: ${project}/guide_snippets.cpp)")
endif()
message(STATUS "${out}")
