"""Server-rendered pages (Jinja2, inline SVG; no front-end build): the start page and planning
form, a search's progress, plan history, one plan, one alternative (docs/service.md, Pages)."""
