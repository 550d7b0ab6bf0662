"""Every image the deployment pulls is pinned by digest (scripts/pin_images.py, make
pin-images): the Dockerfile's ``FROM`` lines and docker-compose.yml's ``image:`` keys."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from scripts.pin_images import FILES, image_references

ROOT = Path(__file__).resolve().parents[2]
PINNED = re.compile(r"^[a-z0-9][a-z0-9._/-]*:[\w.-]+@sha256:[0-9a-f]{64}$")


def test_every_image_reference_carries_a_digest():
    dockerfile = (ROOT / "Dockerfile").read_text()
    froms = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    images = [service["image"] for service in services.values() if "image" in service]
    assert froms and images
    assert [ref for ref in froms + images if not PINNED.match(ref)] == []


def test_the_pin_script_sees_every_reference_the_files_hold():
    """What make pin-images rewrites is what the files pull: nothing missed."""
    for name in FILES:
        text = (ROOT / name).read_text()
        found = [m["digest"] for m in image_references(text)]
        assert len(found) == text.count("@sha256:") and all(found), name
