#!/usr/bin/env bash
# Starts the reference app (clients/apps.json "java-servlet") built by clients/java/build.sh:
#   clients/java/reference.sh --dsn postgresql://user@host:port/db --port N
# Tiered compilation stops at C1 and class data sharing stays on: the suite starts it three times.
here="$(cd "$(dirname "$0")" && pwd)"
J=/usr/share/java
# shellcheck source=version.sh
source "$here/version.sh"
version="$(pom_version)"
exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto \
    -cp "$here/build/reference.jar:$here/build/pg-idem-http-$version.jar:$J/tomcat10-embed-core.jar:$J/postgresql.jar" \
    io.github.pgidem.http.ReferenceApp "$@"
