"""What the benchmark ran on: machine, PostgreSQL, and the pg_idem library (its build profile read
from the ELF sections of the .so), recorded in results.json."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import struct
import subprocess
from pathlib import Path

def elf_section_names(path: str) -> set[str]:
    """Section names of an ELF64 little-endian shared object (enough to spot debug info)."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if ident[:4] != b"\x7fELF" or ident[4] != 2:
                return set()
            e_shoff = struct.unpack_from("<Q", ident, 0x28)[0]
            e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
            f.seek(e_shoff)
            sh = f.read(e_shentsize * e_shnum)
            def sect(i):
                return struct.unpack_from("<IIQQQQIIQQ", sh, i * e_shentsize)
            strtab = sect(e_shstrndx)
            f.seek(strtab[4])
            names = f.read(strtab[5])
            out = set()
            for i in range(e_shnum):
                off = sect(i)[0]
                out.add(names[off:names.index(b"\0", off)].decode(errors="replace"))
            return out
    except (OSError, struct.error, ValueError):
        return set()


def environment(server) -> dict:
    env = {}
    env["cpus"] = os.cpu_count()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        env["cpu_model"] = m.group(1).strip() if m else platform.processor()
        mem = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        env["memory_gib"] = round(int(mem.group(1)) / 1024 / 1024, 1) if mem else None
    except OSError:
        env["cpu_model"] = platform.processor()
    env["kernel"] = platform.release()
    env["python"] = platform.python_version()
    env["postgres"] = server.value("SELECT version()")
    env["pgbench"] = subprocess.run(["pgbench", "--version"], capture_output=True, text=True).stdout.strip()
    env["pg_idem_version"] = server.value("SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'")
    libdir = server.value("SELECT setting FROM pg_config() WHERE name = 'PKGLIBDIR'")
    so = os.path.join(libdir, "pg_idem.so")
    try:
        st = os.stat(so)
        sections = elf_section_names(so)
        debug = ".debug_info" in sections
        env["pg_idem_so"] = {
            "path": so, "bytes": st.st_size,
            "mtime": dt.datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds"),
            "debug_info": debug,
            "profile_guess": ("debug (has .debug_info; unoptimised dev profile likely)"
                              if debug and st.st_size > 20_000_000 else
                              "release (no .debug_info)" if not debug else
                              "release with debug info"),
        }
    except OSError:
        env["pg_idem_so"] = {"path": so, "profile_guess": "unknown"}
    names = ["shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size",
             "checkpoint_timeout", "full_page_writes", "wal_compression", "autovacuum",
             "max_connections", "shared_preload_libraries", "pg_idem.purge_interval",
             "pg_idem.purge_batch_size", "pg_idem.database", "work_mem", "default_transaction_isolation",
             "lc_collate", "jit", "wal_sync_method", "huge_pages"]
    rows = server.rows("SELECT name, current_setting(name) FROM pg_settings WHERE name IN ("
                       + ",".join(f"'{n}'" for n in names) + ") ORDER BY name")
    env["settings"] = {k: v for k, v in rows}
    return env


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
