"""Tests of the container image, run by scripts/test-container once it has built it (as root, with podman)."""
