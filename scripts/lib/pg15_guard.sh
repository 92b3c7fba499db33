# shellcheck shell=bash
# Debian's PostgreSQL 15 is the system's own, and the test command's in-server and install steps
# write pg_idem's files into it. Source this file (scripts/test.sh):
#
#   save_pg15       keeps what is there now (a package's files, a build of the user's, or none)
#   restore_pg15    puts exactly that back, by rename as scripts/install.sh does (a running server
#                   keeps the library it has mapped), removes what was not there, and fails when
#                   the files differ from what was saved
#
# as_root CMD... runs CMD as root (sudo when not root).

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

pg15_dirs=(/usr/lib/postgresql/15/lib /usr/share/postgresql/15/extension)
pg15_saved=""
pg15_files() { find "$1" -maxdepth 1 -type f \( -name pg_idem.so -o -name pg_idem.control -o -name 'pg_idem--*.sql' \) | sort; }
# pg15_manifest ROOT: checksum, mode, owner and name of each such file under ROOT (the saved
# copy, or "" for the system)
pg15_manifest() {
    local dir file
    for dir in "${pg15_dirs[@]}"; do
        [ -d "$1$dir" ] || continue
        for file in $(pg15_files "$1$dir"); do
            echo "$(sha256sum <"$file" | cut -d' ' -f1) $(stat -c '%a %U:%G' "$file") ${file#"$1"}"
        done
    done
}
save_pg15() {
    local dir file
    pg15_saved="$(mktemp -d /tmp/pg_idem_pg15_saved.XXXXXX)" || return 1
    for dir in "${pg15_dirs[@]}"; do
        mkdir -p "$pg15_saved$dir" || return 1
        [ -d "$dir" ] || continue
        for file in $(pg15_files "$dir"); do
            cp -a "$file" "$pg15_saved$file" || return 1
        done
    done
    pg15_manifest "" >"$pg15_saved.manifest"
    echo "saved the pg_idem files of Debian's PostgreSQL 15 ($(wc -l <"$pg15_saved.manifest")), to put back at the end"
}
restore_pg15() {
    [ -n "$pg15_saved" ] || return 0
    local dir file saved rc=0
    for dir in "${pg15_dirs[@]}"; do
        [ -d "$dir" ] || continue
        for file in $(pg15_files "$dir"); do
            [ -f "$pg15_saved$file" ] || as_root rm -f "$file" || rc=1
        done
        for saved in $(pg15_files "$pg15_saved$dir"); do
            file="${saved#"$pg15_saved"}"
            if ! cmp -s "$saved" "$file"; then
                { as_root cp -a "$saved" "$file.restore.$$" && as_root mv -f "$file.restore.$$" "$file"; } || rc=1
            fi
        done
    done
    if [ "$rc" = 0 ] && diff "$pg15_saved.manifest" <(pg15_manifest ""); then
        echo "Debian's PostgreSQL 15: pg_idem's files are as they were before the test command ($(wc -l <"$pg15_saved.manifest"))"
        rm -rf "$pg15_saved" "$pg15_saved.manifest"
    else
        echo "Debian's PostgreSQL 15: pg_idem's files could not be put back as they were; the saved ones are in $pg15_saved" >&2
        rc=1
    fi
    pg15_saved=""
    return $rc
}

