"""The reconcile loop: a pure state machine (machine.py) and its runner (loop.py)."""
