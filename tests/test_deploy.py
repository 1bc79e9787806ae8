"""The deployment files, checked with the linters that install from the registries.

Docker cannot run on these machines, so nothing here builds an image or starts a pod: the
Dockerfile goes through hadolint, every YAML file through yamllint, the ``ray up`` file
through Ray's own cluster-config JSON schema, and the Kubernetes objects through
kubernetes-validate (KubeRay's RayCluster is a CRD it has no schema for, so its pod templates
are validated as Pods and its own fields are checked here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"


def ray_pin() -> str:
    match = re.search(r'"ray==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert match, "pyproject.toml must pin ray exactly"
    return match.group(1)


def tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    assert os.path.exists(path), f"{name} is missing: pip install -e '.[test]'"
    return path


def test_dockerfile_passes_hadolint_and_uses_the_pinned_ray_image():
    proc = subprocess.run([tool("hadolint"), str(DOCKER / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (DOCKER / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray_pin()}-py311" in text
    assert 'torch==2.13.0' in text


def test_every_yaml_file_passes_yamllint():
    files = [str(p) for p in (*DOCKER.glob("*.yaml"), *(ROOT / "configs").glob("*.yaml"))]
    proc = subprocess.run([tool("yamllint"), "-c", str(ROOT / ".yamllint.yaml"), *files], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ray_up_config_matches_rays_schema():
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((DOCKER / "cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert config["head_node_type"] in config["available_node_types"]
    mounts = " ".join(config["docker"]["run_options"])
    assert "/mnt/nvme:/mnt/nvme" in mounts and "/mnt/shared:/mnt/shared" in mounts


def test_kuberay_manifest_mounts_nvme_for_hot_and_a_shared_volume_for_warm():
    docs = list(yaml.safe_load_all((DOCKER / "kuberay.yaml").read_text()))
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    kubernetes_validate.validate(pvc, "1.31", strict=True)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["spec"]["rayVersion"] == ray_pin()
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    for group in groups:
        assert "rayStartParams" in group
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": group["template"]["spec"]}
        kubernetes_validate.validate(pod, "1.31", strict=True)
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["nvme"]["hostPath"]["path"].startswith("/mnt/disks/")
        assert volumes["warm"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert env["TIERLOAD_HOT__DIR"].startswith(mounts["nvme"])
        assert env["TIERLOAD_WARM__URL"].startswith(mounts["warm"])
    for worker in cluster["spec"]["workerGroupSpecs"]:
        assert {"groupName", "replicas", "template"} <= set(worker)


@pytest.mark.parametrize("variables", [
    {"TIERLOAD_HOT__DIR": "/mnt/nvme/tierload-hot", "TIERLOAD_HOT__CAPACITY_BYTES": "1500GiB",
     "TIERLOAD_WARM__URL": "/mnt/shared/tierload-warm"},
])
def test_the_images_environment_is_a_valid_tierload_config(variables):
    from tierload.config.loading import load_config

    config = load_config(environ=variables)
    assert config.hot.dir == "/mnt/nvme/tierload-hot" and config.warm.url == "/mnt/shared/tierload-warm"
    assert config.hot.capacity_bytes == 1500 * 2**30
