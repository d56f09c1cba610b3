"""What the engines measured, from their `/metrics` (untrusted): the bounded scrape, the exposition reader,
acceptance and step-time counters, and the window that turns counter samples into figures.

May import: no other package (pure, but for the scrape's one HTTP exchange).
"""
