"""Server-rendered pages (Jinja2, inline SVG; no front-end build): plan history and one plan."""
