# SPDX-License-Identifier: ISC
"""idem_build: the PEP 517 build backend of the idemd-client package.

It owns turning contrib/python/ into a wheel (and an sdist, and an
editable wheel) with the standard library alone.  It must never write
anywhere but the directory pip hands it, and never need a package pip
would have to download.

Why not setuptools: a fresh Debian 12 venv has setuptools 66 but not
`wheel`, so `pip install --no-build-isolation` with setuptools fails
("invalid command 'bdist_wheel'"), and without --no-build-isolation pip
downloads setuptools; venvs of Python 3.12 and later have no setuptools
at all.  With this backend (build-system.requires is empty) a plain
`pip install ./contrib/python` works offline in any venv, and setuptools
would also have written build/ and *.egg-info into the source tree.

The metadata is here, not in pyproject.toml's [project] table, because
reading TOML needs tomllib (Python 3.11+) and the package supports 3.8.
The version is idem/__init__.py's __version__ (one place).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

Config = Optional[Dict[str, Any]]

NAME = "idemd-client"
SUMMARY = ("Client of idemd, the broker that makes agents' side effects "
           "(FCoP tasks, any tool call) idempotent")
REQUIRES_PYTHON = ">=3.8"
PACKAGE = "idem"
HERE = os.path.dirname(os.path.abspath(__file__))
# The files of the sdist besides the package (relative to HERE).
SDIST_EXTRA = ("pyproject.toml", "idem_build.py", "README.md")
# Reproducible archives: SOURCE_DATE_EPOCH when set, else 1980-01-01
# (the earliest a zip can hold).
ZIP_EPOCH = 315532800


def _version() -> str:
    with open(os.path.join(HERE, PACKAGE, "__init__.py"),
              encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if m is None:
        raise RuntimeError("idem/__init__.py has no __version__ line")
    return m.group(1)


def _dist_name() -> str:
    """The distribution's file-name form (PEP 427: - becomes _)."""
    return re.sub(r"[-_.]+", "_", NAME)


def _timestamp() -> int:
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", ZIP_EPOCH)), ZIP_EPOCH)


def _package_files() -> List[Tuple[str, str]]:
    """(archive name, absolute path) of every file of the package, sorted;
    bytecode and editor leftovers are not part of it."""
    out: List[Tuple[str, str]] = []
    root = os.path.join(HERE, PACKAGE)
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") or f == "py.typed":
                path = os.path.join(d, f)
                rel = os.path.relpath(path, HERE).replace(os.sep, "/")
                out.append((rel, path))
    return out


def _metadata() -> bytes:
    readme = ""
    path = os.path.join(HERE, "README.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            readme = f.read()
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + _version(),
        "Summary: " + SUMMARY,
        "Requires-Python: " + REQUIRES_PYTHON,
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Operating System :: POSIX",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    return ("\n".join(lines) + "\n\n" + readme).encode("utf-8")


def _wheel_name() -> str:
    return "%s-%s-py3-none-any.whl" % (_dist_name(), _version())


def _dist_info() -> str:
    return "%s-%s.dist-info" % (_dist_name(), _version())


def _write_wheel(wheel_directory: str,
                 members: Sequence[Tuple[str, bytes]]) -> str:
    """members: (archive name, bytes); adds WHEEL, METADATA and RECORD."""
    info = _dist_info()
    members = list(members) + [
        (info + "/METADATA", _metadata()),
        (info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: idem_build\n"
                           "Root-Is-Purelib: true\nTag: py3-none-any\n")
         .encode("ascii")),
    ]
    record = []
    for name, data in members:
        digest = base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    members.append((info + "/RECORD", ("\n".join(record) + "\n")
                    .encode("utf-8")))
    name = _wheel_name()
    stamp = time.gmtime(_timestamp())[:6]
    tmp = os.path.join(wheel_directory, "." + name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members:
            zi = zipfile.ZipInfo(member, stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, os.path.join(wheel_directory, name))
    return name


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 hooks ----------------------------------------------------------

def get_requires_for_build_wheel(config_settings: Config = None
                                  ) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Config = None
                                  ) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Config = None
                                     ) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Config = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory,
                        [(rel, _read(path)) for rel, path in _package_files()])


def build_editable(wheel_directory: str, config_settings: Config = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose .pth file puts this directory on sys.path."""
    pth = (HERE + "\n").encode("utf-8")
    return _write_wheel(wheel_directory,
                        [("__editable__.%s.pth" % _dist_name(), pth)])


def build_sdist(sdist_directory: str, config_settings: Config = None
                ) -> str:
    base = "%s-%s" % (_dist_name(), _version())
    name = base + ".tar.gz"
    files = [(rel, path) for rel, path in _package_files()]
    files += [(rel, os.path.join(HERE, rel)) for rel in SDIST_EXTRA
              if os.path.exists(os.path.join(HERE, rel))]
    tmp = os.path.join(sdist_directory, "." + name + ".tmp")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(member: str, data: bytes) -> None:
            ti = tarfile.TarInfo(base + "/" + member)
            ti.size = len(data)
            ti.mtime = _timestamp()
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
        add("PKG-INFO", _metadata())
        for rel, path in sorted(files):
            add(rel, _read(path))
    os.replace(tmp, os.path.join(sdist_directory, name))
    return name
