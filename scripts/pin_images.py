"""Pin every image of the Dockerfile and docker-compose.yml by digest: ``make pin-images``.

Each reference is ``<name>:<tag>@sha256:<digest>``: Docker pulls the digest (the tag is for
the reader), so a tag moved upstream (a rebuilt ``python:3.11-slim``) changes nothing until
this script is run again and its diff reviewed. It asks Docker Hub's registry API for the
digest each tag names now (an anonymous pull token from ``auth.docker.io``, then a ``HEAD`` of
the manifest, whose ``Docker-Content-Digest`` is the multi-platform index's digest: the same on
every architecture) and rewrites the references. ``--check`` only reports the references
whose tag has moved (exit 1), for a scheduled job. Needs the network; not part of make test
(tests/unit/test_image_pins.py checks the files offline).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
FILES = ("Dockerfile", "docker-compose.yml")
#: ``FROM x`` or ``image: x``, with or without a digest already.
REFERENCE = re.compile(
    r"(?P<lead>^FROM\s+|^\s*image:\s*)(?P<name>[a-z0-9][a-z0-9._/-]*):(?P<tag>[\w.-]+)"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?",
    re.MULTILINE,
)
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def image_references(text: str) -> list[re.Match[str]]:
    """Every ``FROM`` and ``image:`` reference of a Dockerfile or compose file."""
    return list(REFERENCE.finditer(text))


def current_digest(client: httpx.Client, name: str, tag: str) -> str:
    """The digest Docker Hub's ``name:tag`` names now (``sha256:...``)."""
    repository = name if "/" in name else f"library/{name}"
    token = (
        client.get(
            "https://auth.docker.io/token",
            params={"service": "registry.docker.io", "scope": f"repository:{repository}:pull"},
        )
        .raise_for_status()
        .json()["token"]
    )
    answer = client.head(
        f"https://registry-1.docker.io/v2/{repository}/manifests/{tag}",
        headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT},
    ).raise_for_status()
    return answer.headers["Docker-Content-Digest"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report moved tags, change nothing")
    check = parser.parse_args().check
    moved = 0
    with httpx.Client(timeout=20) as client:
        for filename in FILES:
            path = ROOT / filename
            text = path.read_text()
            for match in reversed(image_references(text)):
                digest = current_digest(client, match["name"], match["tag"])
                if digest == match["digest"]:
                    continue
                moved += 1
                print(f"{filename}: {match['name']}:{match['tag']} {match['digest']} -> {digest}")
                pinned = f"{match['lead']}{match['name']}:{match['tag']}@{digest}"
                text = text[: match.start()] + pinned + text[match.end() :]
            if not check:
                path.write_text(text)
    return 1 if check and moved else 0


if __name__ == "__main__":
    sys.exit(main())
