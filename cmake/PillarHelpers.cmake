# One helper per target kind, so every target gets the same warnings and include roots.

set(PILLAR_WARNINGS -Wall -Wextra -Werror)

# pillar_library(NAME SRCS ... DEPS ...)
function(pillar_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${PILLAR_WARNINGS})
  pillar_abseil_deps(deps ${ARG_DEPS})
  target_link_libraries(${name} PUBLIC ${deps})
endfunction()

# pillar_module(NAME OUTPUT_NAME SRCS ... DEPS ...): one of pillar's modules, lib<OUTPUT_NAME>.so,
# a shared object the binary loads with dlopen (common/module_loader.h). It lands beside the
# binary, where the loader looks first; the pillar libraries it copies in stay private to it
# (only its entry point is exported), and an unresolved symbol fails the build, not a dlopen in
# production: the linker's --no-undefined, or, when Abseil is static and bound to the host's
# copy (cmake/PillarAbseil.cmake), a check of the linked module against what the host exports.
function(pillar_module name output_name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} MODULE ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${PILLAR_WARNINGS} -fvisibility=hidden)
  target_compile_definitions(${name} PRIVATE PILLAR_VERSION="${PROJECT_VERSION}")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES
    OUTPUT_NAME ${output_name} PREFIX lib LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/src)
  target_link_options(${name} PRIVATE -Wl,--exclude-libs,ALL)
  if(PILLAR_STATIC_ABSEIL)
    add_custom_command(TARGET ${name} POST_BUILD
      COMMAND ${PROJECT_SOURCE_DIR}/cmake/check_module_symbols.sh $<TARGET_FILE:${name}>
              ${PILLAR_ABSEIL_EXPORTS}
      VERBATIM)
  else()
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
endfunction()

# pillar_test(NAME SRCS ... DEPS ...): a GoogleTest binary registered with CTest.
function(pillar_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(${name} PRIVATE ${PILLAR_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  pillar_abseil_host(${name})  # some tests load the modules
  add_test(NAME ${name} COMMAND ${name})
  set(environment "PILLAR_BINARY=$<TARGET_FILE:pillar>;PILLAR_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(TARGET pillar_torch_module)
    # Test binaries live elsewhere than the module, which the loader looks for beside its binary.
    string(APPEND environment ";PILLAR_TORCH_MODULE=$<TARGET_FILE:pillar_torch_module>")
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${environment}" LABELS "${ARG_LABELS}")
endfunction()

# pillar_benchmark(NAME SRCS ... DEPS ...): a Google Benchmark binary, not part of the tests.
function(pillar_benchmark name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${PILLAR_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
