# Debian packages of rkv, made by CPack from the install rules
# (deploy/package.sh runs it; docs/design.md §11.5):
#
#   rkv-client   librkv and librkv_proto (the control-plane code librkv and
#                the servers load), kvctl, the C++ headers and the CMake
#                package (find_package(rkv))
#   rkv-server   rkv-server, rkv-coordinator, rkv-gateway and
#                librkv_etcd_proto, the systemd units (rkv-coordinator.service,
#                rkv-server@.service, rkv-gateway.service)
#                with their example environment files; its postinst makes
#                the system user rkv the units run as
#   python3-rkv  the Python module (when it is built)
#
# Each package is one install component. Dependencies on Debian's
# libraries come from dpkg-shlibdeps (dpkg-dev), with the packages' own
# shared libraries found in the build tree; rkv-server and python3-rkv
# depend on the rkv-client of the same version for librkv_proto and librkv,
# rkv-server on passwd for its postinst. deploy/check-packages.sh installs
# them on a fresh Debian 12 root and runs them there.
# The packages install under /usr, whatever CMAKE_INSTALL_PREFIX says.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rkv)
set(CPACK_PACKAGE_VENDOR "rkv")
set(CPACK_PACKAGE_CONTACT "rkv maintainers <rkv@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RDMA-backed distributed key-value store")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_OUTPUT_FILE_PREFIX ${PROJECT_BINARY_DIR}/packages)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The packages' own libraries: dpkg-shlibdeps resolves them here, and the
# dependency between the packages is declared below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    ${PROJECT_BINARY_DIR}/proto ${PROJECT_BINARY_DIR}/client ${PROJECT_BINARY_DIR}/coordinator/etcd)

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME rkv-client)
# The verbs transport needs a provider of the NIC (or SoftRoCE's rxe).
set(CPACK_DEBIAN_CLIENT_PACKAGE_RECOMMENDS "ibverbs-providers")
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
    "rkv client library, kvctl and C++ headers\n librkv (one-sided GETs over RDMA or tcp, PUTs through the servers' staging rings), kvctl and the CMake package.")

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME rkv-server)
# passwd: the postinst's useradd (Debian 12's apt pulls it in through
# adduser, but a system need not have apt).
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "rkv-client (= ${PROJECT_VERSION}), passwd")
set(CPACK_DEBIAN_SERVER_PACKAGE_SUGGESTS "etcd-server")
set(CPACK_COMPONENT_SERVER_DESCRIPTION
    "rkv server, coordinator and gateway with their systemd units\n rkv-server serves a hash table in RDMA-registered memory, kept durable in RocksDB; rkv-coordinator keeps the membership and shard map; rkv-gateway serves Redis and memcached clients on rkv.")
# CPack ships a CONTROL_EXTRA file under its own name, and dpkg runs only
# the one named postinst: the script is copied to that name (under another
# name it was dead weight in the package, and the user rkv was never made).
# A postinst of our own replaces the ldconfig CPack would have written for
# librkv_etcd_proto; dpkg's ldconfig trigger does that job, as debhelper's
# packages have it.
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/rkv-server.postinst
               ${PROJECT_BINARY_DIR}/packaging/postinst COPYONLY)
file(WRITE ${PROJECT_BINARY_DIR}/packaging/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/packaging/postinst ${PROJECT_BINARY_DIR}/packaging/triggers)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-rkv)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "rkv-client (= ${PROJECT_VERSION}), python3")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "Python module of the rkv client\n The module rkv: rkv.Client over librkv.")

# The systemd units as packaged: the binaries are in /usr/bin there, not in
# /usr/local/bin as for a `cmake --install` by hand (deploy/systemd/README.md).
foreach(_unit rkv-coordinator.service rkv-server@.service rkv-gateway.service)
  file(READ ${PROJECT_SOURCE_DIR}/deploy/systemd/${_unit} _text)
  string(REPLACE "/usr/local/bin/" "/usr/bin/" _text "${_text}")
  file(WRITE ${PROJECT_BINARY_DIR}/packaging/${_unit} "${_text}")
  install(FILES ${PROJECT_BINARY_DIR}/packaging/${_unit} COMPONENT server EXCLUDE_FROM_ALL
          DESTINATION lib/systemd/system)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/coordinator.env
              ${PROJECT_SOURCE_DIR}/deploy/systemd/coordinator-etcd.env
              ${PROJECT_SOURCE_DIR}/deploy/systemd/server-example.env
              ${PROJECT_SOURCE_DIR}/deploy/systemd/etcd-example.env
              ${PROJECT_SOURCE_DIR}/deploy/systemd/gateway.env
              ${PROJECT_SOURCE_DIR}/deploy/systemd/README.md
        COMPONENT server EXCLUDE_FROM_ALL DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/rkv-server/examples)

include(CPack)
