# Layers the linker enforces.
#
# rkv's libraries form layers (docs/design.md, "Code layout"), written down
# once in cmake/layers.txt: which files each layer holds and which layers it
# may use. Three checks hold the code to that table:
#   - here, at configure time: a library links only rkv libraries its row
#     allows (directly or through the layers it uses);
#   - here, at build time: a library's code uses only what it links
#     (rkv_layer_check below);
#   - the ctest `layering_includes` (cmake/check_layer_includes.py): a file
#     includes only files of its own layer and the layers below, which covers
#     header-only code the linker never sees.
#
# A static library alone does not prove that it uses only what it links
# (its undefined symbols wait for whatever a program links after it), so
# rkv_layer_check(LIB) adds a program that links every object of LIB (whole
# archive) with nothing but LIB's declared dependencies: if LIB's code uses
# a symbol of a layer it does not link, that program fails to link and so
# does the build.
function(rkv_layer_check lib)
  set(check rkv_layer_check_${lib})
  add_executable(${check} ${PROJECT_SOURCE_DIR}/cmake/layer_check_main.cc)
  target_link_libraries(${check} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${lib}>" rkv_warnings)
  target_link_options(${check} PRIVATE -Wl,--no-undefined -Wl,--no-as-needed)
  set_target_properties(${check} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layer_checks)
endfunction()

# Reads cmake/layers.txt: RKV_LAYERS (every layer) and, per layer L,
# RKV_LAYER_USES_<L> (the layers L may use directly).
function(_rkv_read_layer_table)
  set(table ${PROJECT_SOURCE_DIR}/cmake/layers.txt)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${table})
  file(STRINGS ${table} lines)
  set(layers "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "#.*" "" line "${line}")
    string(REGEX MATCHALL "[^ \t]+" words "${line}")
    list(LENGTH words n)
    if(n LESS 2)
      continue()
    endif()
    list(GET words 0 layer)
    list(GET words 1 kind)
    if(kind STREQUAL "uses")
      set(uses "")
      if(n GREATER 2)
        list(SUBLIST words 2 -1 uses)
      endif()
      list(APPEND layers ${layer})
      set(RKV_LAYER_USES_${layer} "${uses}" PARENT_SCOPE)
    endif()
  endforeach()
  set(RKV_LAYERS "${layers}" PARENT_SCOPE)
endfunction()

# Every layer LAYER may use, directly or through the layers it uses: OUT.
function(_rkv_layers_below layer out)
  set(below "")
  set(todo ${RKV_LAYER_USES_${layer}})
  while(todo)
    list(POP_FRONT todo next)
    if(next STREQUAL "*")
      set(below ${RKV_LAYERS})
      break()
    endif()
    if(NOT next IN_LIST below)
      list(APPEND below ${next})
      list(APPEND todo ${RKV_LAYER_USES_${next}})
    endif()
  endwhile()
  set(${out} "${below}" PARENT_SCOPE)
endfunction()

# At the end of the configure step, when every library and its links exist:
# each library the table names links only rkv libraries its row allows. (A
# new library's files are in no row until one is added, which the include
# check reports.)
function(_rkv_verify_layer_links)
  _rkv_read_layer_table()
  foreach(layer IN LISTS RKV_LAYERS)
    if(NOT TARGET ${layer})
      continue()  # a layer that is no library (public_api, programs)
    endif()
    _rkv_layers_below(${layer} below)
    get_target_property(links ${layer} LINK_LIBRARIES)
    foreach(link IN LISTS links)
      if(link IN_LIST RKV_LAYERS AND NOT link IN_LIST below)
        message(FATAL_ERROR "${layer} links ${link}, which cmake/layers.txt does not put below ${layer}")
      endif()
    endforeach()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL _rkv_verify_layer_links)
