"""Repository tooling importable from the repository root (e.g. `hack.controlplane`, behind hack/cluster)."""
