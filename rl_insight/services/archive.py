"""Safe archive extraction: nothing outside the target directory, no links pointing out, no devices.

Everything is checked before anything is written, so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import zipfile
from pathlib import Path

from ..errors import InvalidInputError


def _check_name(name: str, archive: Path) -> None:
    norm = posixpath.normpath(name.replace("\\", "/"))
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or norm == ".." or norm.startswith("../"):
        raise InvalidInputError(
            f"unsafe path {name!r} in {archive.name}: archives may not write outside their directory",
            hint="the archive is refused; nothing was installed",
        )


def _check_link(member: tarfile.TarInfo, archive: Path) -> None:
    target = member.linkname
    if member.issym():
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), target))
    else:  # hard link: relative to the archive root
        resolved = posixpath.normpath(target)
    if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
        raise InvalidInputError(f"link {member.name!r} -> {target!r} in {archive.name} points outside the archive",
                                hint="the archive is refused; nothing was installed")


def safe_extract(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            for info in infos:
                _check_name(info.filename, archive)
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise InvalidInputError(f"symlink {info.filename!r} in {archive.name}: links are not allowed in "
                                            "zip archives")
            for info in infos:
                z.extract(info, dest)
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    os.chmod(dest / info.filename, mode)
        return
    try:
        with tarfile.open(archive) as t:
            members = t.getmembers()
            for m in members:
                _check_name(m.name, archive)
                if m.issym() or m.islnk():
                    _check_link(m, archive)
                elif not (m.isfile() or m.isdir()):
                    raise InvalidInputError(f"{m.name!r} in {archive.name} is a device or fifo; refused")
            t.extractall(dest, members=members, filter="tar" if hasattr(tarfile, "data_filter") else None)
    except tarfile.TarError as exc:
        raise InvalidInputError(f"{archive} is not a readable tar or zip archive: {exc}") from None
