# shellcheck shell=bash
# The package's version, pom.xml's, which its jar is named after (build/pg-idem-http-<version>.jar).
# Source this file (by a path that is right from the current directory): build.sh, pack.sh,
# setup.sh, test.sh and reference.sh read the version from here.
#   pom_version   prints it
java_package_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pom_version() {
    sed -n 's#^  <version>\(.*\)</version>#\1#p' "$java_package_dir/pom.xml" | head -n 1
}
