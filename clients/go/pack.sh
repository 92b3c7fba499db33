#!/usr/bin/env bash
# Builds the module as a Go module proxy serves it into the folder OUT, and prints the file's
# path:
#   pg_idem-clients-go-v<version>.zip   every entry under <module path>@v<version>/ (go.mod's
#                                       module path; the version is version.go's Version)
# holding what `go mod download` would zip from a tag of this repository: the module's files
# git tracks or does not ignore, without the subdirectories that are modules of their own
# (reference/) and without vendor/ directories, and the repository's LICENSE at the top (the go
# command adds it to a module in a subdirectory that has none). clients/release.sh runs it;
# clients/release-check.sh checks what it makes.
#   clients/go/pack.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "$1" && pwd)"
cd "$here"
module="$(sed -n 's/^module //p' go.mod)"
version="$(sed -nE 's/^const Version = "([^"]+)"$/\1/p' version.go)"
if [ -z "$module" ] || [ -z "$version" ]; then
    echo "clients/go/pack.sh: no module path in go.mod or no Version in version.go" >&2
    exit 1
fi
zip="$out/${module//\//-}-v$version.zip"
listing="$(mktemp)"
trap 'rm -f "$listing"' EXIT
git ls-files -z --cached --others --exclude-standard . >"$listing"
python3 - "$module@v$version" "$zip" ../../LICENSE "$listing" <<'PY'
import os, sys, zipfile
prefix, target, license_file, listing = sys.argv[1:]
with open(listing) as f:
    files = sorted(set(p for p in f.read().split("\0") if p and os.path.isfile(p)))
# a directory below the module's root that has a go.mod is a module of its own
nested = {os.path.dirname(p) for p in files if os.path.basename(p) == "go.mod" and os.path.dirname(p)}
def wanted(path):
    parts = path.split("/")
    if "vendor" in parts[:-1] or os.path.islink(path):
        return False
    return not any(path.startswith(d + "/") for d in nested)
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
    for path in filter(wanted, files):
        z.write(path, f"{prefix}/{path}")
    if "LICENSE" not in files:
        z.write(license_file, f"{prefix}/LICENSE")
PY
echo "$zip"
