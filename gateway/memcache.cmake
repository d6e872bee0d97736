# The memcached text protocol of rkv-gateway (included by
# gateway/CMakeLists.txt): its parser, item encoding and sessions, their
# tests, and the real-client suite (memccapable, memcslap, Node.js's
# memcached package).
#
# The parser and the item encoding are pure (no rkv: the fuzz target
# links them alone); the sessions execute on librkv.
add_library(rkv_gateway_memcache_parser STATIC
  ${CMAKE_CURRENT_LIST_DIR}/memcache_item.cc
  ${CMAKE_CURRENT_LIST_DIR}/memcache_parser.cc
)
target_include_directories(rkv_gateway_memcache_parser PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(rkv_gateway_memcache_parser PRIVATE rkv_warnings)
rkv_layer_check(rkv_gateway_memcache_parser)

add_library(rkv_gateway_memcache STATIC ${CMAKE_CURRENT_LIST_DIR}/memcache_session.cc)
target_compile_definitions(rkv_gateway_memcache PRIVATE RKV_GATEWAY_VERSION="${PROJECT_VERSION}")
target_link_libraries(rkv_gateway_memcache PUBLIC rkv_gateway_memcache_parser rkv PRIVATE rkv_warnings)
rkv_layer_check(rkv_gateway_memcache)
if(TARGET rkv-gateway)
  target_link_libraries(rkv-gateway PRIVATE rkv_gateway_memcache)
endif()

if(RKV_BUILD_TESTS)
  include(GoogleTest)
  # Pure parts: the parser (every command and error, every split of a
  # pipeline) and the item encoding and arithmetic.
  add_executable(gateway_memcache_test
    ${CMAKE_CURRENT_LIST_DIR}/memcache_parser_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/memcache_item_test.cc)
  target_link_libraries(gateway_memcache_test PRIVATE rkv_gateway_memcache_parser rkv_warnings rkv_test_main)
  gtest_discover_tests(gateway_memcache_test DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 300)

  # Sessions executing on a real rkv-server (started by the test).
  add_executable(gateway_memcache_session_test ${CMAKE_CURRENT_LIST_DIR}/memcache_session_test.cc)
  target_link_libraries(gateway_memcache_session_test PRIVATE rkv_gateway_memcache rkv_test_gateway
                        rkv_warnings rkv_test_main Threads::Threads)
  add_dependencies(gateway_memcache_session_test rkv-server)
  gtest_discover_tests(gateway_memcache_session_test DISCOVERY_MODE PRE_TEST
    PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)

  # Real memcached clients against rkv-gateway on a real rkv-server
  # (tests/gateway/memcached_clients_test.py): memccapable -a (Debian's
  # name for memcapable), memcslap, Node.js's memcached package
  # (tests/gateway/node/), request scripts answered byte for byte as a real
  # memcached answers them, and hostile inputs the gateway must survive
  # with bounded memory. A missing tool skips (77), or fails under
  # RKV_NO_SKIP=1.
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  foreach(client memcapable memcslap node_memcached memcached_differential memcached_hostile)
    add_test(NAME gateway_${client}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/gateway/memcached_clients_test.py ${client}
              $<TARGET_FILE:rkv-gateway> $<TARGET_FILE:rkv-server>)
    set_tests_properties(gateway_${client} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 RUN_SERIAL TRUE)
  endforeach()
endif()
