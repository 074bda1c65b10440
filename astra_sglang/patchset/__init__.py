"""The patch set on disk, the format its writers (optimize, tune, hand) and the in-server runtime (patching/)
share: manifest.py (a patch's manifest.json) and store.py (the patch folders layered, listed, enabled, built)."""
