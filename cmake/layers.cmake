# SPDX-License-Identifier: Apache-2.0
# The layers of the tree, lowest first (../shared STYLE: "Layers read
# downward"). A module may include headers of its own layer and the layers
# below; including a higher one fails the build. Run as a script:
#   cmake -DXF_SOURCE_DIR=... [-DXF_STAMP=file] -P cmake/layers.cmake
set(XF_LAYERS
  "base"
  "crypto,storage,codec"
  "privacy,policy,kernels,data"
  "job"
  "update"
  "net,http"
  "cmd"
  "coordinator,site,cli")

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
        if(DEFINED _xf_level_${_target})
          if(_xf_level_${_target} GREATER _xf_level_${_module})
            file(RELATIVE_PATH _rel "${XF_SOURCE_DIR}" "${_file}")
            string(STRIP "${_line}" _line)
            string(APPEND _faults
                   "  ${_rel}: ${_line}: ${_module}/ (layer ${_xf_level_${_module}}) may not "
                   "include ${_target}/ (layer ${_xf_level_${_target}})\n")
          endif()
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(_faults)
  message(FATAL_ERROR "a lower module includes a higher one (cmake/layers.cmake lists the "
                      "layers; move the shared code down, or the include up):\n${_faults}")
endif()
if(XF_STAMP)
  file(WRITE "${XF_STAMP}" "layers ok\n")
endif()
