"""Static assets of report.html (inlined into the page at render time)."""
