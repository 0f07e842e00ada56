# The EXL3 quantizer and converter (tandem convert --to exl3): a static library over tandem_exl3_impl. The Viterbi
# kernel compiles twice, baseline and AVX2, and quantize.cpp picks one at run time.
add_library(tandem_exl3_quant STATIC
  ${CMAKE_CURRENT_LIST_DIR}/quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_viterbi.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_viterbi_avx2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/converter.cpp)
# The pack is written through the safetensors plugin's Writer (the registry), not its headers.
target_link_libraries(tandem_exl3_quant PUBLIC tandem_exl3_impl)
target_include_directories(tandem_exl3_quant PRIVATE ${RAPIDJSON_INCLUDE_DIR})
target_compile_options(tandem_exl3_quant PRIVATE -Wall -Wextra)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/quant_viterbi.cpp ${CMAKE_CURRENT_LIST_DIR}/quant_linear.cpp
  PROPERTIES COMPILE_OPTIONS "-O3")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/quant_viterbi_avx2.cpp PROPERTIES COMPILE_OPTIONS "-O3;-mavx2")
