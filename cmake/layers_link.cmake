# SPDX-License-Identifier: Apache-2.0
# The layers on the link line: what cmake/layers.cmake says of includes,
# said of target_link_libraries. A library or program of module M may link
# the libraries of its own module and of lower layers; linking a higher
# layer's library, or another module's of the same layer (unless
# XF_LAYER_ALLOW names the pair), is refused. So a daemon cannot pull the
# CLI, cairo and all, in through a dispatcher it shares with it.
#
# Included from CMakeLists.txt after every module's folder, this file
# defines xf_layers_write_links(FILE), which writes one line per link
# between two of the tree's targets: "FROM_MODULE FROM_TARGET TO_MODULE
# TO_TARGET". Run as a script, it checks such a file:
#   cmake -DXF_LINKS=file [-DXF_STAMP=file] -P cmake/layers_link.cmake
include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)

if(NOT CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  # The module a target belongs to: the first folder of its source
  # directory under the source root, when that folder is a layered module.
  function(_xf_target_module target out)
    get_target_property(_dir ${target} SOURCE_DIR)
    file(RELATIVE_PATH _rel "${PROJECT_SOURCE_DIR}" "${_dir}")
    string(REGEX REPLACE "/.*$" "" _module "${_rel}")
    set(_found "")
    foreach(_layer IN LISTS XF_LAYERS)
      string(REPLACE "," ";" _modules "${_layer}")
      if(_module IN_LIST _modules)
        set(_found "${_module}")
      endif()
    endforeach()
    set(${out} "${_found}" PARENT_SCOPE)
  endfunction()

  function(xf_layers_write_links file)
    set(_lines "")
    set(_dirs "")
    foreach(_layer IN LISTS XF_LAYERS)
      string(REPLACE "," ";" _modules "${_layer}")
      foreach(_module IN LISTS _modules)
        if(IS_DIRECTORY "${PROJECT_SOURCE_DIR}/${_module}")
          list(APPEND _dirs "${PROJECT_SOURCE_DIR}/${_module}")
        endif()
      endforeach()
    endforeach()
    foreach(_dir IN LISTS _dirs)
      get_property(_targets DIRECTORY "${_dir}" PROPERTY BUILDSYSTEM_TARGETS)
      foreach(_t IN LISTS _targets)
        _xf_target_module(${_t} _from)
        get_target_property(_type ${_t} TYPE)
        if(_type STREQUAL "INTERFACE_LIBRARY")
          get_target_property(_links ${_t} INTERFACE_LINK_LIBRARIES)
        else()
          get_target_property(_links ${_t} LINK_LIBRARIES)
        endif()
        if(NOT _links)
          continue()
        endif()
        foreach(_l IN LISTS _links)
          string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _l "${_l}")
          if(NOT TARGET "${_l}")
            continue()
          endif()
          get_target_property(_imported ${_l} IMPORTED)
          if(_imported)
            continue()
          endif()
          _xf_target_module(${_l} _to)
          if(_to)
            string(APPEND _lines "${_from} ${_t} ${_to} ${_l}\n")
          endif()
        endforeach()
      endforeach()
    endforeach()
    file(WRITE "${file}" "${_lines}")
  endfunction()
  return()
endif()

cmake_minimum_required(VERSION 3.25)
if(NOT XF_LINKS)
  message(FATAL_ERROR "layers_link.cmake needs -DXF_LINKS")
endif()

set(_level 0)
foreach(_layer IN LISTS XF_LAYERS)
  string(REPLACE "," ";" _modules "${_layer}")
  foreach(_module IN LISTS _modules)
    set(_xf_level_${_module} ${_level})
  endforeach()
  math(EXPR _level "${_level} + 1")
endforeach()

file(STRINGS "${XF_LINKS}" _lines)
set(_faults "")
foreach(_line IN LISTS _lines)
  string(REPLACE " " ";" _f "${_line}")
  list(LENGTH _f _n)
  if(NOT _n EQUAL 4)
    message(FATAL_ERROR "${XF_LINKS}: '${_line}' is not FROM_MODULE FROM_TARGET TO_MODULE TO_TARGET")
  endif()
  list(GET _f 0 _from)
  list(GET _f 1 _ft)
  list(GET _f 2 _to)
  list(GET _f 3 _tt)
  if(_from STREQUAL _to OR NOT DEFINED _xf_level_${_from} OR NOT DEFINED _xf_level_${_to})
    continue()
  endif()
  if(_xf_level_${_to} GREATER _xf_level_${_from})
    string(APPEND _faults
           "  ${_ft} (${_from}/, layer ${_xf_level_${_from}}) links ${_tt} (${_to}/, layer "
           "${_xf_level_${_to}}): a higher layer\n")
  elseif(_xf_level_${_to} EQUAL _xf_level_${_from} AND NOT "${_from}>${_to}" IN_LIST XF_LAYER_ALLOW)
    string(APPEND _faults
           "  ${_ft} (${_from}/) links ${_tt} (${_to}/): both layer ${_xf_level_${_from}}, and "
           "XF_LAYER_ALLOW does not name ${_from}>${_to}\n")
  endif()
endforeach()

if(_faults)
  message(FATAL_ERROR "a target links a library of its own layer or a higher one "
                      "(cmake/layers.cmake lists the layers and the allowed pairs; move the "
                      "shared code down, or the link up):\n${_faults}")
endif()
if(XF_STAMP)
  file(WRITE "${XF_STAMP}" "links ok\n")
endif()
