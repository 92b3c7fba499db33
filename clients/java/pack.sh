#!/usr/bin/env bash
# Builds the package as Maven Central gets it into the folder OUT, and prints each file's path:
#   pg-idem-http-<version>.jar           the library, as build.sh makes it (classes,
#                                        contract.json, the licence, META-INF/maven/.../pom.xml)
#   pg-idem-http-<version>.pom           pom.xml
#   pg-idem-http-<version>-sources.jar   src/main (Central wants one beside every jar)
#   pg-idem-http-<version>-javadoc.jar   the public API's javadoc (Central wants one too); a
#                                        doclint error (a broken tag or link) fails the build
# Offline, with the JDK (setup.sh installs it). Left for publishing: the signatures (.asc)
# Central also asks for, made with the publisher's own key. clients/release.sh runs it;
# clients/release-check.sh checks what it makes.
#   clients/java/pack.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "$1" && pwd)"
cd "$here"
# shellcheck source=version.sh
source ./version.sh
version="$(pom_version)"
./build.sh lib >&2
cp "build/pg-idem-http-$version.jar" "$out/"
cp pom.xml "$out/pg-idem-http-$version.pom"
rm -f "$out/pg-idem-http-$version-sources.jar"
jar --create --file "$out/pg-idem-http-$version-sources.jar" -C src/main/java . -C src/main/resources .
# doclint on everything but comments missing on members the README already documents
rm -rf build/javadoc "$out/pg-idem-http-$version-javadoc.jar"
javadoc -quiet -Xdoclint:all,-missing -Werror -d build/javadoc -cp /usr/share/java/tomcat10-embed-core.jar \
    -sourcepath src/main/java -doctitle "pg-idem-http $version" io.github.pgidem.http >&2
jar --create --file "$out/pg-idem-http-$version-javadoc.jar" -C build/javadoc .
printf '%s\n' "$out/pg-idem-http-$version.jar" "$out/pg-idem-http-$version.pom" "$out/pg-idem-http-$version-sources.jar" \
    "$out/pg-idem-http-$version-javadoc.jar"
