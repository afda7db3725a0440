# SPDX-License-Identifier: Apache-2.0
# The layers of the tree, lowest first (../shared STYLE: "Layers read
# downward"), each a list of modules (folders). A module may include headers
# of its own folder and of lower layers. Including a higher layer fails the
# build, and so does including another module of the same layer, unless
# XF_LAYER_ALLOW below names the pair. Included (from CMakeLists.txt, or
# cmake/layers_doc.cmake), this file only defines XF_LAYERS and
# XF_LAYER_ALLOW; run as a script, it checks the tree:
#   cmake -DXF_SOURCE_DIR=... [-DXF_STAMP=file] -P cmake/layers.cmake
set(XF_LAYERS
  "base"
  "crypto,storage,codec,http"
  "privacy,policy,kernels,data"
  "job"
  "update"
  "net"
  "cmd"
  "coordinator,site,cli")

# Same-layer includes that are allowed, as "FROM>TO": FROM/ may include TO/,
# never the other way round (that include is refused as any other), so the
# pair cannot become a cycle. Each entry says why the two are not one module
# and why TO/ is not a layer lower.
set(XF_LAYER_ALLOW
  # Blobs and backups are addressed by their BLAKE2b digest (crypto/digest.h).
  # crypto/ needs nothing of storage/, and cannot sit below it: digests,
  # sealing and the PKI are not storage.
  "storage>crypto"
  # DP-SGD inside the training loop draws its noise and states its privacy
  # cost with privacy/'s samplers and accountant; privacy/ needs nothing of
  # kernels/, but keeps its ledger in storage/, so it cannot sit lower.
  "kernels>privacy")

if(NOT CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  return()
endif()
cmake_minimum_required(VERSION 3.25)
if(NOT XF_SOURCE_DIR)
  message(FATAL_ERROR "layers.cmake needs -DXF_SOURCE_DIR")
endif()

set(_level 0)
foreach(_layer IN LISTS XF_LAYERS)
  string(REPLACE "," ";" _modules "${_layer}")
  foreach(_module IN LISTS _modules)
    set(_xf_level_${_module} ${_level})
  endforeach()
  math(EXPR _level "${_level} + 1")
endforeach()

set(_faults "")
foreach(_layer IN LISTS XF_LAYERS)
  string(REPLACE "," ";" _modules "${_layer}")
  foreach(_module IN LISTS _modules)
    file(GLOB _files "${XF_SOURCE_DIR}/${_module}/*.c" "${XF_SOURCE_DIR}/${_module}/*.h"
         "${XF_SOURCE_DIR}/${_module}/*.cu")
    foreach(_file IN LISTS _files)
      file(STRINGS "${_file}" _includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
      foreach(_line IN LISTS _includes)
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*$" "\\1" _target "${_line}")
        if(NOT DEFINED _xf_level_${_target} OR _target STREQUAL _module)
          continue()
        endif()
        file(RELATIVE_PATH _rel "${XF_SOURCE_DIR}" "${_file}")
        string(STRIP "${_line}" _line)
        if(_xf_level_${_target} GREATER _xf_level_${_module})
          string(APPEND _faults
                 "  ${_rel}: ${_line}: ${_module}/ (layer ${_xf_level_${_module}}) may not "
                 "include ${_target}/ (layer ${_xf_level_${_target}})\n")
        elseif(_xf_level_${_target} EQUAL _xf_level_${_module}
               AND NOT "${_module}>${_target}" IN_LIST XF_LAYER_ALLOW)
          string(APPEND _faults
                 "  ${_rel}: ${_line}: ${_module}/ and ${_target}/ are both layer "
                 "${_xf_level_${_module}}, and XF_LAYER_ALLOW does not name "
                 "${_module}>${_target}\n")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(_faults)
  message(FATAL_ERROR "a module includes a module of its own layer or a higher one "
                      "(cmake/layers.cmake lists the layers and the allowed pairs; move the "
                      "shared code down, or the include up):\n${_faults}")
endif()
if(XF_STAMP)
  file(WRITE "${XF_STAMP}" "layers ok\n")
endif()
