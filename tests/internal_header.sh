#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks a private header's sections against the files they name: every
# function declared under a banner "/* ---- FILE ... */" is defined in
# DIR/FILE, no function is declared outside a section, and no file has two
# sections. Usage: internal_header.sh HEADER DIR. Prints each fault and
# exits 1 when there is one.
set -euo pipefail
header=$1 dir=$2
faults=0
fault() { echo "$header: $*"; faults=$((faults + 1)); }

# Whether FILE defines FN: a line at column 0 naming FN( whose signature
# reaches a "{" before a ";".
defines() {
  awk -v fn="$2" '
    !in_sig && $0 ~ ("^[A-Za-z_].*[ *]" fn "\\(") { in_sig = 1 }
    in_sig {
      b = index($0, "{"); s = index($0, ";")
      if (b && (!s || b < s)) { found = 1; exit }
      if (s) in_sig = 0
    }
    END { exit found ? 0 : 1 }' "$1"
}

declare -A seen=()
section=""
while IFS= read -r line; do
  if [[ $line =~ ^/\*\ ----\ ([A-Za-z0-9_]+\.c) ]]; then
    section=${BASH_REMATCH[1]}
    [[ -n ${seen[$section]:-} ]] && fault "$section has two sections"
    seen[$section]=1
    [[ -f $dir/$section ]] || fault "the section $section names a file $dir does not have"
    continue
  fi
  # A declaration starts at column 0 with its type and names its function.
  [[ $line =~ ^(typedef|struct|#|/\*|\}|\ ) ]] && continue
  [[ $line =~ ^[A-Za-z_][A-Za-z0-9_\ \*]*[\ \*](xf__[A-Za-z0-9_]+)\( ]] || continue
  fn=${BASH_REMATCH[1]}
  if [[ -z $section ]]; then
    fault "$fn is declared before any file's section"
  elif [[ -f $dir/$section ]] && ! defines "$dir/$section" "$fn"; then
    fault "$fn is declared under $section, which does not define it"
  fi
done < "$header"
exit $((faults > 0))
