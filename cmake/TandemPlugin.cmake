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
