#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The size check (STYLE.md: "Size is a smell"): no product file past 1,500
# lines and no function past 120, except those listed with their reason in
# the exceptions section of docs/development.md, which this script reads, so
# the list and the check cannot disagree.
#
#   tests/shape.sh SOURCE_DIR [EXCEPTIONS.md]
#
# Product sources are the *.c, *.h and *.cu files under every top-level
# folder of SOURCE_DIR that holds any, except tests/, bench/, cmake/, docs/,
# build folders (build*, and any folder with a CMakeCache.txt) and hidden
# ones: a new module folder is checked the day it appears. A file whose first
# five lines say "DO NOT EDIT" or "@generated" is generated and skipped.
#
# A function is a definition that starts at column 0 and whose body ends at a
# "}" in column 0 (the tree's style: K&R braces, bodies indented); its length
# counts from the first line of the definition to that brace. An exception is
# a list item in the section, "- `PATH` REASON" for a file's length,
# "- `PATH:FUNCTION` REASON" for one function, "- `PATH:*` REASON" for every
# function of a file; an exception that no longer matches anything fails too,
# so the list only holds what is still true.
set -euo pipefail

max_file_lines=1500
max_function_lines=120
section='Files and functions past the size limits'

src=${1:?usage: tests/shape.sh SOURCE_DIR [EXCEPTIONS.md]}
doc=${2:-$src/docs/development.md}
[[ -d $src ]] || { echo "shape: $src: not a directory" >&2; exit 2; }
[[ -f $doc ]] || { echo "shape: $doc: no such file (it lists the size exceptions)" >&2; exit 2; }

# The exceptions: one "KEY<TAB>REASON" line each, read from the section only.
exceptions=$(awk -v section="$section" '
  /^#+ / { inside = (substr($0, index($0, " ") + 1) == section); next }
  inside && /^- `[^`]+`/ {
    key = $0; sub(/^- `/, "", key); reason = key
    sub(/`.*$/, "", key); sub(/^[^`]*`[ \t]*/, "", reason)
    printf "%s\t%s\n", key, reason
  }' "$doc")
if ! grep -q "^#\+ $section\$" "$doc"; then
  echo "shape: $doc: no section \"$section\" (the list of size exceptions)" >&2
  exit 2
fi

mapfile -t modules < <(
  for d in "$src"/*/; do
    d=${d%/}; name=${d##*/}
    case $name in tests|bench|cmake|docs|build*|.*) continue ;; esac
    [[ -e $d/CMakeCache.txt ]] && continue
    find "$d" \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print -quit | grep -q . && echo "$name"
  done)

# Every measurement over a limit: "KIND<TAB>PATH<TAB>LINE<TAB>NAME<TAB>LENGTH".
measure() {
  local f rel
  for m in "${modules[@]}"; do
    while IFS= read -r -d '' f; do
      head -n 5 "$f" | grep -qE 'DO NOT EDIT|@generated' && continue
      rel=${f#"$src"/}
      awk -v rel="$rel" -v maxf="$max_file_lines" -v maxfn="$max_function_lines" '
        function name_of(head,   i, word, last) {
          # The identifier before the first "(" outside __attribute__((...)).
          gsub(/__attribute__[ \t]*\(\([^()]*(\([^()]*\)[^()]*)*\)\)/, " ", head)
          i = index(head, "("); if (i == 0) return ""
          word = substr(head, 1, i - 1)
          if (!match(word, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/)) return ""
          last = substr(word, RSTART, RLENGTH); sub(/[ \t]+$/, "", last)
          return last
        }
        # A candidate definition starts at column 0 with an identifier and
        # runs until a line ending in "{" (a definition) or ";" (a prototype).
        start == 0 && /^[A-Za-z_]/ && !/^(typedef|struct|enum|union|extern)[ \t]/ {
          head = $0; hstart = NR
        }
        start == 0 && hstart {
          if (NR > hstart) head = head " " $0
          if ($0 ~ /;[ \t]*$/ || $0 ~ /^[ \t]*$/ || NR - hstart > 12) { hstart = 0; next }
          if ($0 ~ /\{[ \t]*$/) {
            eq = index(head, "="); par = index(head, "(")
            if (par > 0 && (eq == 0 || eq > par) && (fn = name_of(head)) != "") start = hstart
            hstart = 0
          }
          next
        }
        # A "};" in column 0 ends an initializer or a type, not a function.
        start && /^};/ { start = 0 }
        start && /^}[ \t]*(\/[\/*].*)?$/ {
          if (NR - start + 1 > maxfn) printf "function\t%s\t%d\t%s\t%d\n", rel, start, fn, NR - start + 1
          start = 0
        }
        END { if (NR > maxf) printf "file\t%s\t1\t-\t%d\n", rel, NR }
      ' "$f"
    done < <(find "$src/$m" \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -type f -print0 | sort -z)
  done
}
found=$(measure)

declare -A listed=() used=()
while IFS=$'\t' read -r key reason; do
  [[ -n $key ]] && listed[$key]=$reason
done <<<"$exceptions"

faults=""
while IFS=$'\t' read -r kind path line fn len; do
  [[ -n $kind ]] || continue
  if [[ $kind == file ]]; then
    if [[ -v listed[$path] ]]; then used[$path]=1; continue; fi
    faults+="  $path: $len lines (limit $max_file_lines): split it by idea into files of its module"$'\n'
  else
    if [[ -v listed[$path:$fn] ]]; then used[$path:$fn]=1; continue; fi
    if [[ -v listed[$path:*] ]]; then used[$path:*]=1; continue; fi
    faults+="  $path:$line: function $fn is $len lines (limit $max_function_lines): split it into named steps"$'\n'
  fi
done <<<"$found"

stale=""
for key in "${!listed[@]}"; do
  reason=${listed[$key]}
  if [[ -z ${reason// } ]]; then
    stale+="  \`$key\`: no reason given: say why it may stay past the limit"$'\n'
  elif [[ ! -v used[$key] ]]; then
    stale+="  \`$key\`: no longer past the limit (or not there): remove its line"$'\n'
  fi
done
stale=$(printf '%s' "$stale" | sort)${stale:+$'\n'}

status=0
if [[ -n $faults ]]; then
  printf 'shape: past the size limits (STYLE.md: a file past ~1,500 lines or a function past ~120 usually holds two ideas); split them, or list each as `PATH` or `PATH:FUNCTION` with its reason under "%s" in %s:\n%s' \
    "$section" "${doc#"$src"/}" "$faults" >&2
  status=1
fi
if [[ -n $stale ]]; then
  printf 'shape: %s, "%s": exceptions that do not hold:\n%s' "${doc#"$src"/}" "$section" "$stale" >&2
  status=1
fi
if [[ $status == 0 ]]; then
  echo "shape ok: ${#modules[@]} module folders (${modules[*]}), ${#listed[@]} listed exceptions"
fi
exit $status
