#!/usr/bin/env bash
# Builds the package offline with the JDK and Debian's jars (no Maven Central here):
#   build/pg-idem-http-0.1.0.jar   the library (classes, contract.json, META-INF/maven/.../pom.xml)
#   build/reference.jar            the reference app (clients/apps.json "java-servlet")
#   build/test-classes             the tests (test.sh runs them)
# The jars it compiles against: Tomcat 10.1 embedded (the Servlet 6 API; the app's server),
# PgJDBC (the app's driver) and JUnit 5, from libtomcat10-embed-java, libpostgresql-jdbc-java and
# junit5 (setup.sh installs them). Recompiles only when a source is newer than its jar.
#   clients/java/build.sh        all three
#   clients/java/build.sh lib    the library's jar alone (pack.sh)
set -euo pipefail
cd "$(dirname "$0")"
J=/usr/share/java
CP_MAIN="$J/tomcat10-embed-core.jar"
CP_REF="$CP_MAIN:$J/postgresql.jar"
CP_TEST="$CP_REF:$J/junit-jupiter-api.jar:$J/apiguardian-api.jar:$J/opentest4j.jar:$J/junit-platform-commons.jar"
# shellcheck source=version.sh
source ./version.sh
version="$(pom_version)"
lib="build/pg-idem-http-$version.jar"
mapfile -t main_sources < <(find src/main/java -name '*.java')
mapfile -t reference_sources < <(find reference -name '*.java')
mapfile -t test_sources < <(find src/test/java -name '*.java')

newer() { # TARGET DIR...: true when TARGET is missing or older than a file under DIR
    local target="$1"; shift
    [ ! -e "$target" ] || [ -n "$(find "$@" pom.xml -newer "$target" -type f -print -quit)" ]
}

if newer "$lib" src/main; then
    rm -rf build/classes && mkdir -p build/classes/META-INF/maven/io.github.pg-idem/pg-idem-http
    javac --release 17 -Xlint:all -Werror -cp "$CP_MAIN" -d build/classes "${main_sources[@]}"
    cp -r src/main/resources/. build/classes/
    cp pom.xml build/classes/META-INF/maven/io.github.pg-idem/pg-idem-http/pom.xml
    cp ../../LICENSE build/classes/META-INF/LICENSE
    jar --create --file "$lib" -C build/classes .
fi
[ "${1:-}" != lib ] || exit 0
if newer build/reference.jar reference "$lib"; then
    rm -rf build/reference-classes && mkdir -p build/reference-classes
    javac --release 17 -Xlint:all -Werror -cp "$CP_REF:$lib" -d build/reference-classes "${reference_sources[@]}"
    jar --create --file build/reference.jar -C build/reference-classes .
fi
if newer build/test-classes.stamp src/test "$lib"; then
    rm -rf build/test-classes && mkdir -p build/test-classes
    javac --release 17 -Xlint:all -Werror -cp "$CP_TEST:$lib:build/reference.jar" -d build/test-classes \
        "${test_sources[@]}"
    touch build/test-classes.stamp
fi
