"""API schemas (request and response bodies), one module per resource; never database rows."""
