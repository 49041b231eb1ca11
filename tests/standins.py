"""Stand-in Tempo and Grafana executables (the real binaries cannot be downloaded here) and release
archives laid out like the official ones, for installer and supervision tests.

The stand-ins answer `--version` like the real tools, read the config file rl-insight renders, and serve
the readiness endpoint on the port that file names; they write what they were given (config path,
environment) next to their log so tests can check it.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import sys
import tarfile
from pathlib import Path

TEMPO = r'''#!{python}
import http.server, json, os, sys, threading
if "--version" in sys.argv:
    print("tempo, version {version} (branch: HEAD, revision: standin)")
    sys.exit(0)
cfg = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-config.file="))
import yaml
c = yaml.safe_load(open(cfg))
mode = os.environ.get("STANDIN_MODE", "ok")
json.dump({{"argv": sys.argv, "config": c}}, open(cfg + ".seen.json", "w"))
if mode == "crash":
    sys.exit(3)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/ready" and mode != "never-ready"
        self.send_response(200 if ok else 503); self.end_headers(); self.wfile.write(b"ready" if ok else b"starting")
    def log_message(self, *a): pass
print("stand-in tempo listening", flush=True)
listen = (c["server"]["http_listen_address"], c["server"]["http_listen_port"])
http.server.ThreadingHTTPServer(listen, H).serve_forever()
'''

GRAFANA = r'''#!{python}
import configparser, http.server, json, os, sys
if "--version" in sys.argv or (len(sys.argv) > 1 and sys.argv[1] == "-v"):
    print("grafana version {version}")
    sys.exit(0)
ini = sys.argv[sys.argv.index("--config") + 1]
cp = configparser.ConfigParser(); cp.read(ini)
json.dump({{"argv": sys.argv, "password": os.environ.get("GF_SECURITY_ADMIN_PASSWORD"),
           "user": os.environ.get("GF_SECURITY_ADMIN_USER")}}, open(ini + ".seen.json", "w"))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"database": "ok", "version": "{version}"}}).encode()
        self.send_response(200 if self.path == "/api/health" else 404); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
print("stand-in grafana listening", flush=True)
http.server.ThreadingHTTPServer((cp["server"]["http_addr"], int(cp["server"]["http_port"])), H).serve_forever()
'''


def write_standin(path: Path, kind: str, version: str) -> Path:
    text = (TEMPO if kind == "tempo" else GRAFANA).format(python=sys.executable, version=version)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _tar(out: Path, files: dict[str, bytes | Path], modes: dict[str, int] | None = None) -> Path:
    with tarfile.open(out, "w:gz", compresslevel=1) as t:
        for name, data in files.items():
            raw = data.read_bytes() if isinstance(data, Path) else data
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = (modes or {}).get(name, 0o755)
            t.addfile(info, io.BytesIO(raw))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_releases(root: Path, plat: str = "linux-amd64") -> dict[str, Path]:
    """Archives with the official names and layouts, plus the vendors' checksum files, under
    root/<service>/v<version>/ (the layout the tests' HTTP server serves as 'official' and 'mirror')."""
    os_, arch = plat.split("-")
    tmp = root / "_src"
    tempo_bin = write_standin(tmp / "tempo", "tempo", "2.6.1")
    grafana_bin = write_standin(tmp / "grafana", "grafana", "13.0.0")
    prom = shutil.which("prometheus") or "/usr/bin/prometheus"
    out = {}
    d = root / "prometheus" / "v2.54.1"
    d.mkdir(parents=True, exist_ok=True)
    asset = f"prometheus-2.54.1.{os_}-{arch}.tar.gz"
    out["prometheus"] = _tar(d / asset, {f"prometheus-2.54.1.{os_}-{arch}/prometheus": Path(prom),
                                          f"prometheus-2.54.1.{os_}-{arch}/LICENSE": b"Apache-2.0\n"})
    (d / "sha256sums.txt").write_text(f"{'0' * 64}  other.tar.gz\n{sha256(out['prometheus'])}  {asset}\n")
    d = root / "alertmanager" / "v0.27.0"
    d.mkdir(parents=True, exist_ok=True)
    asset = f"alertmanager-0.27.0.{os_}-{arch}.tar.gz"
    am = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
    amtool = shutil.which("amtool") or "/usr/bin/amtool"
    out["alertmanager"] = _tar(d / asset, {f"alertmanager-0.27.0.{os_}-{arch}/alertmanager": Path(am),
                                            f"alertmanager-0.27.0.{os_}-{arch}/amtool": Path(amtool)})
    (d / "sha256sums.txt").write_text(f"{sha256(out['alertmanager'])}  {asset}\n")
    d = root / "tempo" / "v2.6.1"
    d.mkdir(parents=True, exist_ok=True)
    asset = f"tempo_2.6.1_{os_}_{arch}.tar.gz"
    out["tempo"] = _tar(d / asset, {"tempo": tempo_bin, "LICENSE": b"AGPL\n"})
    (d / "SHA256SUMS").write_text(f"{sha256(out['tempo'])}  {asset}\n")
    d = root / "grafana" / "v13.0.0"
    d.mkdir(parents=True, exist_ok=True)
    asset = f"grafana-13.0.0.{os_}-{arch}.tar.gz"
    out["grafana"] = _tar(
        d / asset,
        {
            "grafana-v13.0.0/bin/grafana": grafana_bin,
            "grafana-v13.0.0/conf/defaults.ini": b"",
            "grafana-v13.0.0/public/index.html": b"<html></html>",
        },
    )
    (d / f"{asset}.sha256").write_text(sha256(out["grafana"]) + "\n")
    return out
