"""One emitter per training framework: `unsupported(view)` reasons and `trainer(...)` argv."""
