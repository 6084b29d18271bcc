"""Submissions: a stored plan sent to a cluster scheduler through `api.submit`, tracked to its
end by a background poller, its measured run posted back with a plan-scoped report token.
See docs/submissions.md."""
