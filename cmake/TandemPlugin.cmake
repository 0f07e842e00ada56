# tandem_add_plugin(<target> SOURCES ...): a plugin module that exports only the entry points.
# Output: build/lib/tandem/plugins/lib<target>.so, e.g. libtandem-cpu.so.
function(tandem_add_plugin target)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE tandem_core ${P_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${TANDEM_PLUGIN_OUTPUT_DIR}
    BUILD_RPATH "$ORIGIN/../..")
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${CMAKE_CURRENT_FUNCTION_LIST_DIR}/plugin.map" "-Wl,--no-undefined")
  set_property(GLOBAL APPEND PROPERTY TANDEM_PLUGINS ${target})
endfunction()

# tandem_cuda_kernels(<target>): the settings every CUDA kernel library of the project shares: C++17
# for CUDA (CMake 3.25 knows no nvcc flag for the project's C++20), hidden symbols, and the configured
# architectures from sm_80 up (cp.async and kernels tuned for Hopper), or Hopper code plus sm_80 PTX
# when only older ones are configured.
function(tandem_cuda_kernels target)
  set(archs)
  foreach(a ${CMAKE_CUDA_ARCHITECTURES})
    string(REGEX MATCH "^[0-9]+" n "${a}")
    if(n GREATER_EQUAL 80)
      list(APPEND archs ${a})
    endif()
  endforeach()
  if(NOT archs)
    set(archs 90-real 80-virtual)
  endif()
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_EXTENSIONS OFF
    CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_ARCHITECTURES "${archs}")
endfunction()
