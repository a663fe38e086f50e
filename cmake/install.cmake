# Installs the library, its headers and a package config, so find_package(ampgrad) works.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ampgrad EXPORT ampgradTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir ${AMPGRAD_HEADER_DIRS})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampgrad
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/ampgrad/ampgrad.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ampgrad)
install(EXPORT ampgradTargets NAMESPACE ampgrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampgrad)
set(AMPGRAD_CUDA_ENABLED ${AMPGRAD_CUDA})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ampgradConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ampgradConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampgrad)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ampgradConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ampgradConfig.cmake ${PROJECT_BINARY_DIR}/ampgradConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ampgrad)
