#!/usr/bin/env bash
# Installs the Java toolchain from Debian when it is missing (the JDK 17, embedded Tomcat 10.1
# and the jakarta.annotation jar its plain addContext needs, PgJDBC, JUnit 5; apt-get, as root) and builds the package, its reference app and its tests
# offline (build.sh: javac and jar, no Maven Central). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
packages=(openjdk-17-jdk-headless libtomcat10-embed-java libjakarta-annotation-api-java libpostgresql-jdbc-java junit5)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
./build.sh
# shellcheck source=version.sh
source ./version.sh
echo "clients/java ready: clients/java/build/pg-idem-http-$(pom_version).jar"
