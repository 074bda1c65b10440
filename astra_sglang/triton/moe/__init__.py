"""Fused MoE specifics of the tuners: the screening launch (screen.py) and the ordering of its config space
(order.py)."""
