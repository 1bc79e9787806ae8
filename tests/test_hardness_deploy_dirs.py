"""Issue 26 item 4: the shipped deployments give tierload tier directories it accepts.

``docker/cluster.yaml`` ran ``chmod 777`` on the NVMe mount that holds the hot tier, and tierload
refuses a tier directory whose parent others may write (UntrustedDirError). Here the shipped
setup commands run for real against local directories laid out like the mounts (a fresh mount's
root: owned by root, 0755), then the image's environment (docker/Dockerfile, and the pods' env in
docker/kuberay.yaml) is loaded as tierload's config and its tier stores are opened, which runs
tierload's own trust check. The host tools that only make sense on a cloud node are stand-ins:
``sudo`` runs its command, ``mountpoint`` says the mount is there, ``mkfs.ext4`` and ``mount``
fail loudly if ever called. The image's user (uid 1000 in the shipped files) is this test's user.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import yaml

from tierload.config.loading import load_config
from tierload.stores.local import LocalDirStore

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
IMAGE_UID = "1000"  # the ray user of the rayproject/ray image, named in the shipped files

_STAND_INS = {
    "sudo": 'exec "$@"\n',
    "mountpoint": "exit 0\n",  # the local directory stands for a mounted file system
    "mkfs.ext4": 'echo "mkfs.ext4 must not run here: $*" >&2; exit 97\n',
    "mount": 'echo "mount must not run here: $*" >&2; exit 97\n',
}


def _host_tools(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in _STAND_INS.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def _as_here(text: str, mounts: dict[str, Path]) -> str:
    """``text`` with each mount path replaced by its local stand-in, and the image's uid by ours."""
    for mount, local in mounts.items():
        text = text.replace(mount, str(local))
    return text.replace(IMAGE_UID, str(os.geteuid()))


def _fresh_mounts(tmp_path: Path, names: list[str]) -> dict[str, Path]:
    mounts = {}
    for name in names:
        local = tmp_path / "mnt" / Path(name).name
        local.mkdir(parents=True)
        local.chmod(0o755)  # a freshly formatted ext4 or NFS root
        mounts[name] = local
    return mounts


def _dockerfile_env() -> dict[str, str]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def _open_tiers(env: dict[str, str]) -> tuple[Path, Path]:
    """Load ``env`` as tierload's config and open its hot and warm tiers (the trust check runs)."""
    config = load_config(environ=env)
    assert config.warm.url is not None
    hot = LocalDirStore(config.hot.dir, tier="hot-disk")
    warm = LocalDirStore(config.warm.url, tier="warm")
    return hot.root, warm.root


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_cluster_yaml_setup_makes_tier_dirs_tierload_accepts(tmp_path):
    config = yaml.safe_load((DOCKER / "cluster.yaml").read_text())
    mounts = _fresh_mounts(tmp_path, ["/mnt/nvme", "/mnt/shared"])
    path = _host_tools(tmp_path)
    for command in config["initialization_commands"]:
        proc = subprocess.run(["bash", "-c", _as_here(command, mounts)], capture_output=True, text=True,
                              env={"PATH": path, "HOME": str(tmp_path)}, timeout=60)
        assert proc.returncode == 0, proc.stderr
    run_options = " ".join(config["docker"]["run_options"])
    assert all(f"-v {mount}:{mount}" in run_options for mount in mounts)  # same paths in the container
    env = {name: _as_here(value, mounts) for name, value in _dockerfile_env().items()}
    hot, warm = _open_tiers(env)
    for mount in mounts.values():
        assert not _mode(mount) & 0o022, f"{mount} is {_mode(mount):04o}: others may write the mount"
        private = mount / f"tierload-{os.geteuid()}"
        assert _mode(private) == 0o700 and private.stat().st_uid == os.geteuid()
    assert hot.parent == mounts["/mnt/nvme"] / f"tierload-{os.geteuid()}"
    assert warm.parent == mounts["/mnt/shared"] / f"tierload-{os.geteuid()}"


def test_kuberay_init_containers_make_tier_dirs_tierload_accepts(tmp_path):
    docs = list(yaml.safe_load_all((DOCKER / "kuberay.yaml").read_text()))
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    for index, group in enumerate(groups):
        spec = group["template"]["spec"]
        container = spec["containers"][0]
        mounts = _fresh_mounts(tmp_path / str(index), [m["mountPath"] for m in container["volumeMounts"]
                                                       if m["name"] in ("nvme", "warm")])
        init = spec.get("initContainers", [])
        assert init, "no init container makes the ray user's directories on the volumes"
        for step in init:
            env = {e["name"]: _as_here(e["value"], mounts) for e in step.get("env", [])}
            assert step["securityContext"]["runAsUser"] == 0  # only root may create in the volumes' roots
            assert {m["mountPath"] for m in step["volumeMounts"]} <= set(mounts)
            proc = subprocess.run([_as_here(part, mounts) for part in step["command"]], capture_output=True,
                                  text=True, env={"PATH": os.environ["PATH"], **env}, timeout=60)
            assert proc.returncode == 0, proc.stderr
        assert str(container["securityContext"]["runAsUser"]) == IMAGE_UID
        env = {**_dockerfile_env(), **{e["name"]: e["value"] for e in container["env"]}}
        hot, warm = _open_tiers({name: _as_here(value, mounts) for name, value in env.items()})
        assert hot.parent == mounts["/mnt/nvme"] / f"tierload-{os.geteuid()}"
        assert warm.parent == mounts["/mnt/shared"] / f"tierload-{os.geteuid()}"
        assert _mode(hot.parent) == 0o700 and _mode(warm.parent) == 0o700
