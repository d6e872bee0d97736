# Layers the linker enforces.
#
# rkv's libraries form layers (docs/design.md, "Code layout"):
#   rkv_base        status, clock, checksums, tokens, net addresses, mutexes
#   rkv_format      memory layout, hashing, records, the data-plane protocol
#   rkv_transport_* the transport interface and its implementations
#   rkv_proto / rkv_control, then server and client libraries on top
# Each library links only the layers below it. A static library alone does
# not prove that (its undefined symbols wait for whatever a program links
# after it), so rkv_layer_check(LIB) adds a program that links every object
# of LIB (whole archive) with nothing but LIB's declared dependencies: if
# LIB's code uses a symbol of a layer it does not link, that program fails
# to link and so does the build.
function(rkv_layer_check lib)
  set(check rkv_layer_check_${lib})
  add_executable(${check} ${PROJECT_SOURCE_DIR}/cmake/layer_check_main.cc)
  target_link_libraries(${check} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${lib}>" rkv_warnings)
  target_link_options(${check} PRIVATE -Wl,--no-undefined -Wl,--no-as-needed)
  set_target_properties(${check} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layer_checks)
endfunction()
