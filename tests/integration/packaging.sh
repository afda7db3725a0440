#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian packages of this build and the profiles of deploy/deps.list:
#   debs      cpack makes this build's packages (prefix /usr) in a temporary
#             directory: lintian reports no error and no warning on xfed,
#             xfed-coordinator and xfed-site; each one's binaries are
#             stripped, their symbols in PACKAGE-dbgsym (.ddeb, by build ID);
#             every Depends and Recommends is a `run` row of deploy/deps.list
#             (the libraries dpkg-shlibdeps finds, marked shlibs), and every
#             such row is in the packages.
#   profiles  deploy/install-deps.sh's `build run` (the quickstart's) has what
#             the quickstart runs and trains on, and nothing of the test
#             suite's tools, which `test` has; XF_DEPS_PREFIX (bench/gpu/run.sh)
#             installs nothing.
#   chartjs   xfed-coord --dashboard without Chart.js names the Debian package
#             libjs-chart.js, which xfed-coordinator recommends, and where it
#             looked.
#   readme    README.md and deploy/packages.sh --help say the same of where
#             the packages go and of what --keep keeps.
# usage: packaging.sh debs|profiles|chartjs|readme BUILD_DIR
set -euo pipefail
usage="usage: packaging.sh debs|profiles|chartjs|readme BUILD_DIR"
what=${1:?$usage}
build=$(cd "${2:?$usage}" && pwd)
label=$what
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
deps=$src/deploy/deps.list
setup_work "xf-packaging-$what"

# rows 2 PROFILE: the packages of deploy/deps.list in PROFILE; rows 3 shlibs,
# rows 3 depends:DEB, rows 3 recommends:DEB: those with that relation.
rows() {
  local pkg profs rel kind
  while read -r pkg profs rel _; do
    [[ -z $pkg || $pkg == \#* ]] && continue
    if [[ $1 == 2 ]]; then
      if [[ ,$profs, == *",$2,"* ]]; then echo "$pkg"; fi
    elif [[ $2 == *:* ]]; then
      kind=${2%%:*}
      if [[ $rel == "$kind:"* && ,${rel#*:}, == *",${2#*:},"* ]]; then echo "$pkg"; fi
    elif [[ $rel == "$2" ]]; then
      echo "$pkg"
    fi
  done <"$deps"
}
# names: a Depends/Recommends value on stdin as package names, one a line.
names() { tr ',|' '\n' | sed 's/([^)]*)//; s/:any//; s/ //g' | sed '/^$/d'; }
contains() { grep -qx -- "$2" <<<"$1"; }

debs() {
  command -v lintian >/dev/null || fail "lintian is missing (deploy/install-deps.sh test installs it)"
  local out=$work/debs
  (cd "$build" && cpack -G DEB -B "$out" -D CPACK_PACKAGING_INSTALL_PREFIX=/usr) \
    >"$work/logs/cpack.log" 2>&1 || { tail -n 20 "$work/logs/cpack.log" >&2; fail "cpack -G DEB"; }
  local p deb ddeb ids elf id debfiles
  local -A field
  for p in xfed xfed-coordinator xfed-site; do
    deb=$(echo "$out/${p}_"*.deb)
    ddeb=$(echo "$out/${p}-dbgsym_"*.ddeb)
    [[ -f $deb ]] || fail "cpack made no $p package: $(ls "$out")"
    [[ -f $ddeb ]] || fail "cpack made no $p-dbgsym package: $(ls "$out")"
    # Every ELF file of the package has its symbols in the -dbgsym one.
    mkdir -p "$work/x/$p"
    dpkg-deb -x "$deb" "$work/x/$p"
    debfiles=$(dpkg-deb -c "$ddeb" | awk '{print $6}')
    ids=0
    while read -r elf; do
      id=$(readelf -n "$elf" | sed -n 's/.*Build ID: *//p')
      [[ -n $id ]] || fail "$p: ${elf#"$work/x/$p"} has no build ID"
      contains "$debfiles" "./usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" ||
        fail "$p-dbgsym has no symbols for ${elf#"$work/x/$p"} (build ID $id)"
      ids=$((ids + 1))
    done < <(find "$work/x/$p" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print)
    ((ids > 0)) || fail "$p has no binary"
    field[$p.Depends]=$(dpkg-deb -f "$deb" Depends | names)
    field[$p.Recommends]=$(dpkg-deb -f "$deb" Recommends | names)
  done

  # This build's settings may be configured outside /etc (its prefix is not
  # /usr); lintian's tags on that directory alone are the prefix's, and the
  # packaging test (deploy/packages.sh, prefix /usr) lets none through.
  local conf etc_dir report
  conf=$(dpkg-deb --ctrl-tarfile "$(echo "$out"/xfed-coordinator_*.deb)" | tar -xO ./conffiles)
  etc_dir=${conf%%/xfed/*}
  report=$(cd "$out" && lintian --no-cfg ./xfed_*.deb ./xfed-coordinator_*.deb ./xfed-site_*.deb 2>&1 |
    grep -E '^[EW]: ' || true)
  if [[ $etc_dir != /etc ]]; then
    report=$(grep -v -E "^[EW]: xfed-coordinator: [a-z-]+ \[?${etc_dir#/}/" <<<"$report" || true)
  fi
  [[ -z $report ]] || fail "lintian on the packages:"$'\n'"$report"

  # Depends and Recommends are the run rows of deploy/deps.list.
  local shlibs name rel dep seen
  shlibs=$(rows 3 shlibs)
  for p in xfed xfed-coordinator xfed-site; do
    for rel in Depends Recommends; do
      while read -r name; do
        [[ -z $name ]] && continue
        [[ $name =~ ^xfed(-coordinator|-site|-cuda)?$ ]] && continue
        if [[ $rel == Depends ]] && contains "$shlibs" "$name"; then continue; fi
        contains "$(rows 3 "${rel,,}:$p")" "$name" ||
          fail "$p's $rel names $name, which deploy/deps.list has not as a run row for it" \
            "(add '$name run ${rel,,}:$p', or 'shlibs' for a library)"
      done <<<"${field[$p.$rel]}"
    done
  done
  for rel in depends recommends; do
    for p in xfed xfed-coordinator xfed-site; do
      while read -r dep; do
        [[ -z $dep ]] && continue
        contains "${field[$p.${rel^}]}" "$dep" || fail "deploy/deps.list says $p ${rel}s on $dep; it does not"
      done < <(rows 3 "$rel:$p")
    done
  done
  for dep in $shlibs; do
    seen=0
    for p in xfed xfed-coordinator xfed-site; do
      if contains "${field[$p.Depends]}" "$dep"; then seen=1; fi
    done
    ((seen)) || fail "deploy/deps.list has $dep as a library the binaries need; dpkg-shlibdeps finds none"
  done
  for p in xfed xfed-coordinator xfed-site; do
    for dep in $shlibs $(rows 3 "depends:$p") $(rows 3 "recommends:$p"); do
      contains "$(rows 2 run)" "$dep" || fail "$dep has a relation but is not in the run profile"
    done
  done
  echo "debs: ok (lintian-clean, symbols in -dbgsym, relations from the run profile)"
}

profiles() {
  local ins=$src/deploy/install-deps.sh quick testp path t owner mod
  quick=$(bash "$ins" --list build run) || fail "install-deps.sh --list build run"
  [[ $(sort <<<"$quick") == "$( (rows 2 build; rows 2 run) | sort -u)" ]] ||
    fail "install-deps.sh --list build run is not the build and run rows of deploy/deps.list"
  # What the quickstart runs besides the Essential packages, and its data.
  for t in cmake python3; do
    grep -q -E "(^|[ (])$t " "$src/deploy/quickstart.sh" ||
      fail "deploy/quickstart.sh no longer runs $t; update this check"
    contains "$quick" "$t" || fail "the quickstart runs $t, which its profiles (build run) lack"
  done
  owner=$(dpkg -S /usr/share/datasets/fashion-mnist | cut -d: -f1)
  contains "$quick" "$owner" || fail "the quickstart trains on $owner's data, not in build run"
  # The test suite's tools, by the packages that own them on this machine:
  # each in `test`, none in the quickstart's profiles, none run by it.
  testp=$(bash "$ins" --list test)
  for t in chromium chromedriver prometheus promtool podman mmdebstrap clang lintian; do
    path=$(command -v "$t") || fail "$t is missing (deploy/install-deps.sh test installs it)"
    owner=$(dpkg -S "$path" | cut -d: -f1)
    contains "$testp" "$owner" || fail "$t ($owner) is not in the test profile"
    if contains "$quick" "$owner"; then fail "$t ($owner) is in the quickstart's profiles (build run)"; fi
    if grep -v -E '^ *#' "$src/deploy/quickstart.sh" | grep -q -w -- "$t"; then
      fail "deploy/quickstart.sh runs $t"
    fi
  done
  for mod in torch onnx selenium; do
    path=$(/usr/bin/python3 -c "import $mod; print($mod.__file__)" 2>/dev/null) ||
      fail "python3 cannot import $mod (deploy/install-deps.sh test installs it)"
    owner=$(dpkg -S "$path" | cut -d: -f1)
    contains "$testp" "$owner" || fail "python3's $mod ($owner) is not in the test profile"
    if contains "$quick" "$owner"; then fail "python3's $mod ($owner) is in the quickstart's profiles"; fi
  done
  # The GPU kit's private prefix: nothing to install, whatever is missing.
  XF_DEPS_PREFIX=$work/prefix bash "$ins" build run test bench >"$work/logs/prefix.log" 2>&1 &&
    grep -q "using the packages unpacked in $work/prefix" "$work/logs/prefix.log" ||
    fail "install-deps.sh with XF_DEPS_PREFIX: $(cat "$work/logs/prefix.log")"
  local rc=0
  bash "$ins" >"$work/logs/none.log" 2>&1 || rc=$?
  ((rc == 2)) && grep -q "no profile given" "$work/logs/none.log" ||
    fail "install-deps.sh without a profile: exit $rc, $(cat "$work/logs/none.log")"
  echo "profiles: ok (build run: ${quick//$'\n'/ })"
}

chartjs() {
  "$xfed" pki init --dir "$fed" --federation xfed >/dev/null
  "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
  local rc=0 msg
  # shellcheck disable=SC2046
  XF_CHARTJS=$work/none/chart.min.js timeout 60 "$coord_bin" $(tls coord) --residency-policy off \
    --state "$work/coord" --listen 127.0.0.1:0 --dashboard 127.0.0.1:0 2>"$work/logs/coord.log" || rc=$?
  ((rc != 0 && rc != 124)) || fail "xfed-coord --dashboard without Chart.js: exit $rc"
  msg=$(grep -i 'chart' "$work/logs/coord.log") || fail "xfed-coord says nothing of Chart.js"
  [[ $msg == *"$work/none/chart.min.js"* ]] || fail "the refusal does not name the file it read: $msg"
  [[ $msg == *"apt-get install libjs-chart.js"* ]] || fail "the refusal does not name the package: $msg"
  [[ $msg == *"/usr/share/javascript/chart.js/"* ]] || fail "the refusal does not say where it goes: $msg"
  [[ $msg != *install-deps* ]] || fail "the refusal sends an operator to the source tree: $msg"
  contains "$(rows 3 recommends:xfed-coordinator)" libjs-chart.js ||
    fail "deploy/deps.list does not have xfed-coordinator recommend libjs-chart.js"
  echo "chartjs: ok"
}

readme() {
  local dir pk help text
  dir=$(sed -n 's/^build=//p' "$src/deploy/packages.sh" | head -n 1)
  pk=$(sed -n 's|^set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/\(.*\))$|\1|p' "$src/deploy/cpack.cmake")
  [[ -n $dir && -n $pk ]] || fail "no default build directory in deploy/packages.sh or cpack.cmake"
  text=$(tr -s ' \n' '  ' <"$src/README.md")
  [[ $text == *"\`deploy/packages.sh\` builds them into \`$dir/$pk/\`"* ]] ||
    fail "README.md does not say that deploy/packages.sh builds the packages into $dir/$pk/"
  [[ $text != *"packages.sh --keep\` builds"* ]] || fail "README.md says --keep builds the packages"
  [[ $text == *"\`--keep\` keeps that root"* ]] || fail "README.md does not say what --keep keeps"
  help=$(bash "$src/deploy/packages.sh" --help | tr -s ' \n' '  ')
  [[ $help == *"left in DIR/$pk/ either way"* ]] || fail "packages.sh --help does not say where the packages go"
  [[ $help == *"--keep also leave the Debian root"* ]] || fail "packages.sh --help does not say what --keep keeps"
  echo "readme: ok"
}

case $what in
  debs | profiles | chartjs | readme) "$what" ;;
  *) fail "unknown check '$what' (debs, profiles, chartjs or readme)" ;;
esac
