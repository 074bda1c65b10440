"""What a kernel is compared with: SGLang's own ops in the spec's calling convention (adapters.py), other
libraries' kernels (peers.py), and which candidate and baseline `bench` takes when not told (defaults.py)."""
