"""The meshplan service and CLI (the composition root)."""
