"""Installer: official and mirror downloads from a local HTTP server, local archives, bundles,
checksum failures and unsafe archives refused with nothing installed, idempotence."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import subprocess
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rl_insight.errors import InvalidInputError
from rl_insight.services import catalog
from rl_insight.services.installer import ChecksumError, Installer, make_bundle
from tests.integration.conftest import cli
from tests.standins import build_releases, sha256

PLAT = "linux-amd64"


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("releases")
    archives = build_releases(root, PLAT)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", root, archives
    srv.shutdown()


@pytest.fixture
def official(releases, monkeypatch):
    """Point the catalog's 'official' URLs at the local server, keeping each vendor's checksum file layout."""
    base = releases[0]
    for name, spec in list(catalog.CATALOG.items()):
        checksum = spec.checksum_url.rsplit("/", 1)[-1]
        monkeypatch.setitem(catalog.CATALOG, name, dataclasses.replace(
            spec, url=f"{base}/{name}/v{{version}}/{{asset}}", checksum_url=f"{base}/{name}/v{{version}}/{checksum}"))
    return releases


def installed_dirs(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*") if p.is_dir() and not p.name.startswith("."))


def test_official_download_verify_install_and_idempotence(official, tmp_path: Path) -> None:
    inst = Installer(tmp_path / "services", platform=PLAT)
    results = {r.service: r for r in (inst.install(n) for n in ("prometheus", "tempo", "grafana"))}
    assert {r.status for r in results.values()} == {"installed"}
    assert results["prometheus"].sha256 == sha256(official[2]["prometheus"])
    assert installed_dirs(tmp_path / "services") == ["grafana/13.0.0", "prometheus/2.54.1", "tempo/2.6.1"]
    prom = Path(results["prometheus"].path)
    assert prom == tmp_path / "services" / "prometheus" / "2.54.1" / "prometheus-2.54.1.linux-amd64" / "prometheus"
    assert "2.42" in subprocess.run([str(prom), "--version"], capture_output=True, text=True).stdout + \
        subprocess.run([str(prom), "--version"], capture_output=True, text=True).stderr
    assert Path(results["grafana"].path).parts[-3:] == ("grafana-v13.0.0", "bin", "grafana")
    manifest = json.loads((tmp_path / "services" / "manifest.json").read_text())
    assert manifest["services"]["tempo"]["version"] == "2.6.1"
    again = Installer(tmp_path / "services", platform=PLAT).install("tempo")
    assert again.status == "already installed"
    forced = Installer(tmp_path / "services", platform=PLAT, force=True).install("tempo")
    assert forced.status == "installed"


def test_mirror_template_through_the_cli(releases, tmp_path: Path) -> None:
    base = releases[0]
    r = cli(
        tmp_path / "home",
        "server",
        "install",
        "--platform",
        PLAT,
        "--mirror",
        f"{base}/{{service}}/v{{version}}/{{asset}}",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "installed" in r.stdout and installed_dirs(tmp_path / "home" / "services") == \
        ["alertmanager/0.27.0", "grafana/13.0.0", "prometheus/2.54.1", "tempo/2.6.1"]
    check = cli(tmp_path / "home", "server", "install", "--check")
    # the managed install is found (Debian's Prometheus would be found too, but managed comes first)
    assert check.returncode == 0 and "managed" in check.stdout and "13.0.0" in check.stdout and "2.6.1" in check.stdout


def test_local_directory_with_and_without_checksums(releases, tmp_path: Path) -> None:
    _, root, archives = releases
    local = tmp_path / "carried"
    local.mkdir()
    for name in ("tempo", "grafana"):
        (local / archives[name].name).write_bytes(archives[name].read_bytes())
    (local / f"{archives['grafana'].name}.sha256").write_text(sha256(archives["grafana"]))
    inst = Installer(tmp_path / "services", platform=PLAT, local_archive=local, mirror="http://127.0.0.1:9/{asset}")
    assert inst.install("grafana").status == "installed"
    with pytest.raises(ChecksumError, match="no checksum available"):
        inst.install("tempo")  # no SHA256SUMS next to it and the mirror is unreachable
    assert installed_dirs(tmp_path / "services") == ["grafana/13.0.0"]
    ok = Installer(tmp_path / "services", platform=PLAT, local_archive=local, mirror="http://127.0.0.1:9/{asset}",
                   allow_unverified=True).install("tempo")
    assert ok.status == "installed"


def test_checksum_mismatch_refuses_and_names_both_hashes(releases, tmp_path: Path) -> None:
    _, _, archives = releases
    local = tmp_path / "carried"
    local.mkdir()
    (local / archives["tempo"].name).write_bytes(archives["tempo"].read_bytes())
    (local / "SHA256SUMS").write_text(f"{'ab' * 32}  {archives['tempo'].name}\n")
    with pytest.raises(ChecksumError) as err:
        Installer(tmp_path / "services", platform=PLAT, local_archive=local).install("tempo")
    assert "ab" * 32 in str(err.value) and sha256(archives["tempo"]) in str(err.value)
    assert installed_dirs(tmp_path / "services") == []
    assert not list((tmp_path / "services" / "tempo").glob(".*"))  # no temporary leftovers


def _evil_archive(dest: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(dest, "w:gz") as t:
        for m in members:
            t.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return dest


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink-out", "hardlink-out"])
def test_unsafe_archives_are_refused_with_nothing_written(tmp_path: Path, kind: str) -> None:
    local = tmp_path / "carried"
    local.mkdir()
    ok = tarfile.TarInfo("tempo")
    ok.size = 1
    ok.mode = 0o755
    bad = tarfile.TarInfo({"traversal": "../../escaped", "absolute": "/tmp/escaped-abs", "symlink-out": "link",
                           "hardlink-out": "hard"}[kind])
    if kind == "symlink-out":
        bad.type, bad.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
    elif kind == "hardlink-out":
        bad.type, bad.linkname = tarfile.LNKTYPE, "../outside"
    else:
        bad.size = 1
    archive = _evil_archive(local / "tempo_2.6.1_linux_amd64.tar.gz", [ok, bad])
    (local / "SHA256SUMS").write_text(f"{sha256(archive)}  {archive.name}\n")
    with pytest.raises(InvalidInputError, match="outside|unsafe"):
        Installer(tmp_path / "services", platform=PLAT, local_archive=local).install("tempo")
    assert installed_dirs(tmp_path / "services") == []
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped-abs").exists()


def test_bundle_round_trip_and_tampering(official, tmp_path: Path) -> None:
    bundle = tmp_path / "rl-insight-bundle.tar"
    manifest = make_bundle(bundle, [PLAT])
    assert {a["service"] for a in manifest["archives"]} == {"prometheus", "alertmanager", "tempo", "grafana"}
    assert all(a["verified_against"].startswith("http") for a in manifest["archives"])
    assert (tmp_path / "rl-insight-bundle.tar.sha256").read_text().split()[0] == sha256(bundle)
    r = cli(tmp_path / "cluster", "server", "install", "--platform", PLAT, "--local-archive", str(bundle), timeout=120)
    assert r.returncode == 0, r.stderr
    assert installed_dirs(tmp_path / "cluster" / "services") == ["alertmanager/0.27.0", "grafana/13.0.0",
                                                                  "prometheus/2.54.1", "tempo/2.6.1"]
    # a bundle whose manifest no longer matches its archives is refused
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(bundle) as src, tarfile.open(tampered, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name == "bundle-manifest.json":
                doc = json.loads(data)
                doc["archives"][1]["sha256"] = "f" * 64
                data = json.dumps(doc).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    r = cli(
        tmp_path / "cluster2", "server", "install", "--platform", PLAT, "--local-archive", str(tampered), timeout=120
    )
    assert r.returncode == 1 and "checksum mismatch" in r.stderr
    assert "f" * 64 in r.stderr


@pytest.mark.socket  # (a download from a local HTTP server)
def test_clear_errors_for_bad_sources(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        Installer(tmp_path / "s", platform=PLAT, local_archive=tmp_path / "nope")
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar")
    with pytest.raises(InvalidInputError, match="not an rl-insight bundle"):
        Installer(tmp_path / "s", platform=PLAT, local_archive=junk)
    with pytest.raises(InvalidInputError, match="not supported"):
        Installer(tmp_path / "s", platform="windows-amd64")
    r = cli(
        tmp_path / "h",
        "server",
        "install",
        "--platform",
        PLAT,
        "--mirror",
        "http://127.0.0.1:9/{asset}",
        "--service",
        "tempo",
        timeout=60,
    )
    assert r.returncode == 1 and ("cannot reach" in r.stderr or "no checksum" in r.stderr)
