# Abseil, linked into the executables statically and shared with the modules through them.
#
# Why: Debian's Abseil is 35 shared libraries linked with -z now. Loading and binding them was
# 70 % of the start-up of a command such as `pillar key list` (docs/benchmarks.md, "Command
# start-up"). Their static archives, from the same package, cost nothing at start.
#
# The catch: those archives are position-independent executable code, with local-exec TLS
# (R_X86_64_TPOFF32), which no shared object may contain; so the modules (libpillar_torch.so,
# libpillar_collective.so) cannot link them. They do not link Abseil at all. A module's Abseil
# symbols stay undefined and are bound, when the binary dlopens it, to the binary's own copy:
# every executable here is a module host that carries each Abseil library pillar uses whole
# (--whole-archive) and exports exactly Abseil's symbols (a --dynamic-list written from the
# archives). One copy of Abseil per process, so the hash seeds, the mutexes' wait queues and
# the Status representation are the same on both sides of the module boundary.
# tests/modules/module_symbols_test.sh checks that every symbol a module leaves undefined is
# exported by the binary or defined by a library the module names; the dynamic loader checks it
# again at dlopen (RTLD_NOW).
#
# -DPILLAR_STATIC_ABSEIL=OFF links the shared libraries everywhere, modules included, as before.

option(PILLAR_STATIC_ABSEIL "Link Abseil's static archives into executables; modules bind to them"
       ON)

# The Abseil targets pillar links (src/CMakeLists.txt, tests/CMakeLists.txt); a host carries
# these and what they depend on.
set(PILLAR_ABSEIL_COMPONENTS
    absl::any_invocable absl::flat_hash_map absl::function_ref absl::status absl::statusor
    absl::strings absl::synchronization absl::time)

# The archives behind `target` and its Abseil dependencies, appended to the list `out`.
function(_pillar_abseil_archives target out)
  set(archives ${${out}})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    get_target_property(location ${target} IMPORTED_LOCATION_NONE)
    list(APPEND archives ${location})
  endif()
  get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" dep "${dep}")
    if(dep MATCHES "^absl::")
      _pillar_abseil_archives(${dep} archives)
    endif()
  endforeach()
  list(REMOVE_DUPLICATES archives)
  set(${out} ${archives} PARENT_SCOPE)
endfunction()

if(PILLAR_STATIC_ABSEIL)
  # Debian's abslConfig imports the shared libraries; each imported target is pointed at the
  # static archive beside its library (libabsl_X.so.20220623.0.0 -> libabsl_X.a). Abseil's own
  # dependency graph between its targets is kept as the package describes it.
  get_directory_property(imported IMPORTED_TARGETS)
  foreach(target IN LISTS imported)
    if(NOT target MATCHES "^absl::")
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    if(NOT type STREQUAL "SHARED_LIBRARY")
      continue()
    endif()
    get_target_property(location ${target} IMPORTED_LOCATION_NONE)
    string(REGEX REPLACE "\\.so(\\.[0-9.]*)?$" ".a" archive "${location}")
    if(NOT EXISTS "${archive}")
      message(FATAL_ERROR "PILLAR_STATIC_ABSEIL: ${target} has no static archive at ${archive}; "
                          "install libabsl-dev or configure with -DPILLAR_STATIC_ABSEIL=OFF")
    endif()
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION_NONE "${archive}")
  endforeach()

  set(PILLAR_ABSEIL_ARCHIVES)
  foreach(component IN LISTS PILLAR_ABSEIL_COMPONENTS)
    _pillar_abseil_archives(${component} PILLAR_ABSEIL_ARCHIVES)
  endforeach()

  # Exactly the symbols those archives define, as a --dynamic-list.
  execute_process(
    COMMAND nm --defined-only --extern-only --format=just-symbols ${PILLAR_ABSEIL_ARCHIVES}
    OUTPUT_VARIABLE symbols ERROR_QUIET RESULT_VARIABLE nm_status)
  if(NOT nm_status EQUAL 0)
    message(FATAL_ERROR "PILLAR_STATIC_ABSEIL: nm failed on ${PILLAR_ABSEIL_ARCHIVES}")
  endif()
  # One symbol per line, among "member.o:" headers and blank lines; Abseil's own symbols are the
  # ones in its namespace or with its C prefix (the rest are compiler helpers such as
  # DW.ref.__gxx_personality_v0, which every module has its own of).
  string(REPLACE "\n" ";" symbols "${symbols}")
  list(FILTER symbols INCLUDE REGEX "^(_Z.*4absl|Absl)")
  list(REMOVE_DUPLICATES symbols)
  list(SORT symbols)
  list(JOIN symbols ";\n  " symbols)
  set(PILLAR_ABSEIL_EXPORTS ${PROJECT_BINARY_DIR}/abseil_exports.list)
  file(CONFIGURE OUTPUT ${PILLAR_ABSEIL_EXPORTS} CONTENT "{\n  ${symbols};\n};\n" @ONLY)
endif()

# pillar_abseil_deps(OUT DEPS...): DEPS with each Abseil target limited to what is not a module
# (modules bind to the host's Abseil), when Abseil is static.
function(pillar_abseil_deps out)
  set(result)
  foreach(dep IN LISTS ARGN)
    if(PILLAR_STATIC_ABSEIL AND dep MATCHES "^absl::")
      if(NOT dep IN_LIST PILLAR_ABSEIL_COMPONENTS)
        message(FATAL_ERROR "${dep}: add it to PILLAR_ABSEIL_COMPONENTS (cmake/PillarAbseil.cmake) "
                            "so that module hosts carry it")
      endif()
      set(dep "$<$<NOT:$<STREQUAL:$<TARGET_PROPERTY:TYPE>,MODULE_LIBRARY>>:${dep}>")
    endif()
    list(APPEND result "${dep}")
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# pillar_abseil_host(TARGET): the executable TARGET may dlopen pillar's modules: it carries the
# Abseil pillar uses whole and exports its symbols to them.
function(pillar_abseil_host target)
  if(NOT PILLAR_STATIC_ABSEIL)
    return()
  endif()
  target_link_options(${target} PRIVATE
    "LINKER:--whole-archive" ${PILLAR_ABSEIL_ARCHIVES} "LINKER:--no-whole-archive"
    "LINKER:--dynamic-list=${PILLAR_ABSEIL_EXPORTS}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${PILLAR_ABSEIL_EXPORTS})
endfunction()
