"""The monitor's image (issue 55), built here with podman from Debian's and PyPI's packages (tools/build_image.sh) and
run as a user would: `--network host`, the token read from what it prints, a demo sent from the host, the run in the
API, the managed Prometheus scraping the server inside, the image's health check passing, a restart keeping the run
(the volume), a clean stop on SIGTERM; then the image saved to one verified file, deleted, loaded from that file alone,
and the same smoke test passing again."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import answers_healthz, free_port, prom_query, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.container


def _podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "tools" / "containers.conf"))}


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=_podman_env())
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stdout[-2000:]}\n"
                             f"{done.stderr[-2000:]}")
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The image, built once for the module, and its saved file."""
    if shutil.which("podman") is None or shutil.which("debootstrap") is None:
        if os.environ.get("CI"):
            pytest.fail("podman or debootstrap missing in CI; .ci/run must install Debian's podman, runc, debootstrap")
        pytest.skip("podman / debootstrap not installed (apt-get install podman runc debootstrap)")
    saved = tmp_path_factory.mktemp("image") / "rl-insight-image.tar"
    done = subprocess.run([str(ROOT / "tools" / "build_image.sh"), "--save", str(saved)], capture_output=True,
                          text=True, timeout=1200, env=_podman_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    image = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"localhost/rl-insight:\d+\.\d+\.\d+.*", image), image
    assert "MiB)" in done.stderr  # the size said
    return image, saved


class Running:
    """One container of the image on the host's network, on free ports, with a named volume as /data."""

    def __init__(self, image: str, volume: str) -> None:
        self.name = f"rl-insight-test-{uuid.uuid4().hex[:8]}"
        self.port, self.prom_port, self.am_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        podman("run", "-d", "--name", self.name, "--network", "host", "-v", f"{volume}:/data", image,
               "--port", str(self.port), "--prometheus-port", str(self.prom_port),
               "--alertmanager-port", str(self.am_port), "--scrape-interval", "1s")
        self.wait_ready()

    def wait_ready(self) -> None:
        def ready() -> bool:
            state = podman("inspect", self.name, "--format", "{{.State.Status}}").stdout.strip()
            if state in ("exited", "stopped"):
                raise AssertionError(f"the container stopped: {self.logs()[-3000:]}")
            return answers_healthz(self.url) and "RL_INSIGHT_TOKEN=" in self.logs()
        wait_until(ready, timeout=120, interval=0.5, what="the container's server")

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    @property
    def token(self) -> str:
        return re.findall(r"RL_INSIGHT_TOKEN=(\S+)", self.logs())[-1]

    def api(self, path: str) -> Any:
        r = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        r.raise_for_status()
        return r.json()

    def remove(self) -> None:
        podman("rm", "-f", "-t", "5", self.name, check=False)


def _demo(url: str, token: str, experiment: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rl_insight", "demo", "--server-url", url, "--token", token,
                           "--steps", "3", "--step-seconds", "1", "--replicas", "2", "--ranks", "2",
                           "--experiment-name", experiment], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _smoke(image: str, volume: str, restart: bool) -> None:
    box = Running(image, volume)
    try:
        token = box.token
        _demo(box.url, token, "in-a-box")
        runs = {r["experiment_name"]: r for r in box.api("/api/v1/runs")["runs"]}
        assert runs["in-a-box"]["last_step"] == 3, runs
        assert httpx.get(box.url + "/api/v1/runs").status_code == 401  # on 0.0.0.0: a token, generated
        assert httpx.get(box.url + "/").status_code == 200 and "rl-insight" in httpx.get(box.url + "/").text.lower()
        prom = f"http://127.0.0.1:{box.prom_port}"
        wait_until(lambda: [r["value"][1] for r in prom_query(prom, 'up{job="rl_insight_server"}')] == ["1"],
                   timeout=60, interval=0.5, what="Prometheus inside to scrape the server")
        services = box.api("/api/v1/services")["services"]
        assert (services["prometheus"]["state"], services["alertmanager"]["state"]) == ("running", "running"), services
        podman("healthcheck", "run", box.name)  # the image's HEALTHCHECK passes (exit 0)
        if restart:
            podman("restart", "-t", "30", box.name, timeout=120)
            box.wait_ready()
            assert box.token == token  # the token lives in the volume too
            assert box.api("/api/v1/runs")["runs"][0]["experiment_name"] == "in-a-box"
        podman("stop", "-t", "30", box.name, timeout=120)
        state = podman("inspect", box.name, "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}").stdout.split()
        assert state == ["0", "false"], (state, box.logs()[-3000:])  # SIGTERM: a clean stop, not a kill
    finally:
        box.remove()


def test_the_image_serves_a_demo_keeps_its_run_and_loads_from_its_saved_file(built: tuple[str, Path]) -> None:
    image, saved = built
    volume = f"rl-insight-test-{uuid.uuid4().hex[:8]}"
    try:
        _smoke(image, volume, restart=True)
        podman("volume", "rm", "-f", volume)
        # air-gapped: the file alone, checked, then loaded where the image is not
        assert subprocess.run(["sha256sum", "-c", saved.name + ".sha256"], cwd=saved.parent,
                              capture_output=True).returncode == 0
        podman("rmi", "-f", image, "localhost/rl-insight:latest")
        assert podman("image", "exists", image, check=False).returncode != 0
        podman("load", "-i", str(saved), timeout=300)
        assert podman("image", "exists", image, check=False).returncode == 0
        _smoke(image, volume, restart=False)
    finally:
        podman("volume", "rm", "-f", volume, check=False)
