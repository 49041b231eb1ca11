"""`rl-insight server install` and `server bundle`: verified installs from a bundle, a directory of
archives, a mirror, or the official URLs.

Every archive's sha256 is checked before extraction (vendor checksum file from the same origin, a
checksum file next to a local archive, the bundle manifest, or a pinned sum); extraction is safe and
goes to a temporary directory that is renamed into `<install>/<service>/<version>/` only when
complete, so a failed install leaves nothing behind and running install twice does nothing.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidInputError, RLInsightError
from ..fsutil import atomic_write
from .archive import safe_extract
from .catalog import CATALOG, PLATFORMS, ServiceSpec
from .download import Progress, download, fetch_text, parse_checksums, sha256_file

BUNDLE_FORMAT = "rl-insight-bundle/1"
BUNDLE_MANIFEST = "bundle-manifest.json"


class ChecksumError(RLInsightError):
    exit_code = 1


@dataclass(frozen=True)
class Source:
    kind: str  # bundle | local | mirror | official
    where: str  # path or URL of the archive
    expected_sha256: str | None
    checksum_origin: str  # where the expected sum came from


@dataclass
class InstallResult:
    service: str
    version: str
    status: str  # installed | already installed
    path: str
    source: str
    sha256: str


def _mirror_url(template: str, spec: ServiceSpec, version: str, plat: str) -> str:
    os_, arch = plat.split("-")
    return template.format(service=spec.name, version=version, os=os_, arch=arch, asset=spec.asset_name(version, plat))


def _sibling(url: str, name: str) -> str:
    parts = urlsplit(url)
    path = parts.path.rsplit("/", 1)[0] + "/" + name
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Installer:
    def __init__(self, install_dir: Path, *, platform: str, versions: dict[str, str | None] | None = None,
                 local_archive: Path | None = None, mirror: str | None = None, force: bool = False,
                 allow_unverified: bool = False, report: Callable[[str], None] = lambda _: None,
                 progress: Callable[[str], Progress] | None = None) -> None:
        if platform not in PLATFORMS:
            raise InvalidInputError(f"platform {platform!r} is not supported; choose one of {', '.join(PLATFORMS)}")
        self.install_dir = install_dir
        self.platform = platform
        self.versions = {name: (versions or {}).get(name) or spec.version for name, spec in CATALOG.items()}
        self.local_archive = local_archive
        self.mirror = mirror
        self.force = force
        self.allow_unverified = allow_unverified
        self.report = report
        self.progress = progress
        if local_archive is not None and not local_archive.exists():
            raise InvalidInputError(f"--local-archive {local_archive} does not exist")
        self._bundle = self._read_bundle(local_archive) if local_archive and local_archive.is_file() else None

    # ------------------------------------------------------------------ manifest
    @property
    def manifest_path(self) -> Path:
        return self.install_dir / "manifest.json"

    def manifest(self) -> dict:
        try:
            return json.loads(self.manifest_path.read_text())
        except (FileNotFoundError, ValueError):
            return {"services": {}}

    def _record(self, result: InstallResult) -> None:
        m = self.manifest()
        m.setdefault("services", {})[result.service] = {
            **asdict(result),
            "installed_at": time.time(),
            "platform": self.platform,
        }
        atomic_write(self.manifest_path, json.dumps(m, indent=2))

    # ------------------------------------------------------------------ sources
    @staticmethod
    def _read_bundle(path: Path) -> dict:
        try:
            with tarfile.open(path) as t:
                member = t.getmember(BUNDLE_MANIFEST)
                data = json.loads(t.extractfile(member).read())  # type: ignore[union-attr]  # a regular member (checked above) always has a file object
        except (tarfile.TarError, KeyError, ValueError) as exc:
            raise InvalidInputError(
                f"{path} is not an rl-insight bundle ({exc})",
                hint="pass the directory that holds the archives, or a file made by `rl-insight server bundle`",
            ) from None
        if data.get("format") != BUNDLE_FORMAT:
            raise InvalidInputError(f"{path}: unknown bundle format {data.get('format')!r}; expected {BUNDLE_FORMAT}")
        return data

    def _local_checksum(self, directory: Path, asset: str, spec: ServiceSpec) -> tuple[str | None, str]:
        single = directory / f"{asset}.sha256"
        if single.exists():
            return parse_checksums(single.read_text(), asset, "single"), str(single)
        for name in ("sha256sums.txt", "SHA256SUMS", "checksums.txt"):
            f = directory / name
            if f.exists():
                found = parse_checksums(f.read_text(), asset, "sums")
                if found:
                    return found, str(f)
        pinned = spec.pinned.get(asset)
        return (pinned, "pinned in the catalog") if pinned else (None, "")

    def source_for(self, spec: ServiceSpec, version: str) -> Source:
        asset = spec.asset_name(version, self.platform)
        if self._bundle is not None:
            for a in self._bundle["archives"]:
                if a["service"] == spec.name and a["version"] == version and a["platform"] == self.platform:
                    return Source("bundle", a["path"], a["sha256"], f"bundle manifest of {self.local_archive}")
            raise InvalidInputError(
                f"bundle {self.local_archive} has no {spec.name} {version} for {self.platform}",
                hint="it holds: " + ", ".join(sorted({f"{a['service']} {a['version']} {a['platform']}"
                                                      for a in self._bundle["archives"]})),
            )
        if self.local_archive is not None:
            candidate = self.local_archive / asset
            if candidate.exists():
                sha, origin = self._local_checksum(self.local_archive, asset, spec)
                return Source("local", str(candidate), sha, origin)
            self.report(f"{asset} not in {self.local_archive}; trying the "
                        f"{'mirror' if self.mirror else 'official URL'}")
        if self.mirror:
            url = _mirror_url(self.mirror, spec, version, self.platform)
            sha, origin = self._remote_checksum(
                url,
                spec,
                asset,
                [
                    url + ".sha256",
                    _sibling(url, spec.checksum_url.rsplit("/", 1)[-1].format(version=version, asset=asset)),
                ],
            )
            return Source("mirror", url, sha, origin)
        url = spec.url.format(version=version, asset=asset)
        sha, origin = self._remote_checksum(url, spec, asset, [spec.checksum_url.format(version=version, asset=asset)])
        return Source("official", url, sha, origin)

    def _remote_checksum(
        self, url: str, spec: ServiceSpec, asset: str, candidates: list[str]
    ) -> tuple[str | None, str]:
        for c in candidates:
            try:
                text = fetch_text(c)
            except RLInsightError:
                continue
            kind = "single" if c.endswith(".sha256") else "sums"
            sha = parse_checksums(text, asset, kind)
            if sha:
                return sha, c
        pinned = spec.pinned.get(asset)
        return (pinned, "pinned in the catalog") if pinned else (None, "")

    # ------------------------------------------------------------------ install
    def installed_path(self, name: str, version: str) -> Path:
        return self.install_dir / name / version

    def install(self, name: str) -> InstallResult:
        spec = CATALOG[name]
        version = self.versions[name]
        target = self.installed_path(name, version)
        recorded = self.manifest().get("services", {}).get(name)
        if target.is_dir() and not self.force and recorded and recorded.get("version") == version \
                and Path(recorded.get("path", "")).exists():
            return InstallResult(name, version, "already installed", recorded["path"], recorded.get("source", ""),
                                 recorded.get("sha256", ""))
        src = self.source_for(spec, version)
        if src.expected_sha256 is None and not self.allow_unverified:
            raise ChecksumError(
                f"no checksum available for {spec.asset_name(version, self.platform)} ({src.kind}: {src.where})",
                hint="put the vendor checksum file next to the archive, or pass --allow-unverified to accept it as is",
            )
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self._ensure_dir(self.install_dir / name)))
        try:
            archive = work / spec.asset_name(version, self.platform)
            if src.kind == "official" or src.kind == "mirror":
                self.report(f"downloading {name} {version} from {src.where}")
                actual = download(src.where, archive, self.progress(f"{name} {version}") if self.progress else None)
            elif src.kind == "bundle":
                with tarfile.open(self.local_archive) as t:
                    member = t.extractfile(src.where)
                    if member is None:
                        raise InvalidInputError(f"bundle entry {src.where} is not a file")
                    with open(archive, "wb") as f:
                        shutil.copyfileobj(member, f)
                actual = sha256_file(archive)
            else:
                shutil.copyfile(src.where, archive)
                actual = sha256_file(archive)
            if src.expected_sha256 is not None and actual != src.expected_sha256:
                raise ChecksumError(
                    f"checksum mismatch for {archive.name}: expected {src.expected_sha256} ({src.checksum_origin}), "
                    f"got {actual}",
                    hint="the archive is corrupt or was tampered with; nothing was installed",
                )
            if src.expected_sha256 is None:
                self.report(f"warning: installing {archive.name} without verification (--allow-unverified)")
            extracted = work / "tree"
            safe_extract(archive, extracted)
            binary = self._find_binary(extracted, spec)
            if target.exists():
                shutil.rmtree(target)
            (extracted).rename(target)  # same filesystem: atomic
            path = target / binary.relative_to(extracted)
            result = InstallResult(name, version, "installed", str(path), f"{src.kind}: {src.where}", actual)
            self._record(result)
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)

    @staticmethod
    def _ensure_dir(p: Path) -> Path:
        p.mkdir(parents=True, exist_ok=True)
        return p

    @staticmethod
    def _find_binary(tree: Path, spec: ServiceSpec) -> Path:
        found = [p for name in spec.binaries for p in tree.rglob(name) if p.is_file()]
        if not found:
            raise InvalidInputError(f"no {' or '.join(spec.binaries)} executable inside the {spec.name} archive",
                                    hint="is this the right archive for this service and platform?")
        best = min(found, key=lambda p: (len(p.parts), p.name != spec.binaries[0]))
        best.chmod(best.stat().st_mode | 0o111)
        return best


# ---------------------------------------------------------------------- bundle
def make_bundle(
    output: Path,
    platforms: list[str],
    *,
    versions: dict[str, str | None] | None = None,
    mirror: str | None = None,
    local_archive: Path | None = None,
    allow_unverified: bool = False,
    report: Callable[[str], None] = lambda _: None,
    progress: Callable[[str], Progress] | None = None,
) -> dict:
    """Download and verify every archive for `platforms` and write one tar with a manifest of sums."""
    archives = []
    with tempfile.TemporaryDirectory(prefix=".bundle-", dir=output.parent if output.parent.exists() else None) as tmp:
        tmpdir = Path(tmp)
        for plat in platforms:
            inst = Installer(
                tmpdir / "unused",
                platform=plat,
                versions=versions,
                mirror=mirror,
                local_archive=local_archive,
                allow_unverified=allow_unverified,
                report=report,
                progress=progress,
            )
            for name, spec in CATALOG.items():
                version = inst.versions[name]
                src = inst.source_for(spec, version)
                if src.expected_sha256 is None and not allow_unverified:
                    raise ChecksumError(
                        f"no checksum available for {spec.asset_name(version, plat)} ({src.where})",
                        hint="a bundle only carries verified archives; pass --allow-unverified to override",
                    )
                asset = spec.asset_name(version, plat)
                dest = tmpdir / plat / asset
                dest.parent.mkdir(parents=True, exist_ok=True)
                if src.kind in ("official", "mirror"):
                    report(f"downloading {asset}")
                    actual = download(src.where, dest, progress(asset) if progress else None)
                else:
                    shutil.copyfile(src.where, dest)
                    actual = sha256_file(dest)
                if src.expected_sha256 is not None and actual != src.expected_sha256:
                    raise ChecksumError(f"checksum mismatch for {asset}: expected {src.expected_sha256} "
                                        f"({src.checksum_origin}), got {actual}")
                archives.append(
                    {
                        "service": name,
                        "version": version,
                        "platform": plat,
                        "asset": asset,
                        "sha256": actual,
                        "path": f"{plat}/{asset}",
                        "verified_against": src.checksum_origin or "unverified",
                    }
                )
        manifest = {"format": BUNDLE_FORMAT, "created_at": time.time(), "platforms": platforms, "archives": archives}
        (tmpdir / BUNDLE_MANIFEST).write_text(json.dumps(manifest, indent=2))
        partial = output.with_name(output.name + ".partial")
        with tarfile.open(partial, "w") as t:
            t.add(tmpdir / BUNDLE_MANIFEST, arcname=BUNDLE_MANIFEST)
            for a in archives:
                t.add(tmpdir / a["path"], arcname=a["path"])
        partial.replace(output)
    (output.with_name(output.name + ".sha256")).write_text(f"{sha256_file(output)}  {output.name}\n")
    return manifest
